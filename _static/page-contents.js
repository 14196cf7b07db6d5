/* "On this page": the highlight follows the section being read, and on a phone the
 * drawer closes once an entry is tapped.
 *
 * pydata-sphinx-theme 0.20 highlights an entry when its heading crosses a band at the
 * top of the window (an IntersectionObserver on the headings). A heading that crosses
 * the band between two frames (a fast scroll, End, a search result, a link), a long
 * section whose heading is off screen, or scrolling back up leaves the wrong entry lit
 * or none (upstream pydata/pydata-sphinx-theme#1965, #1724, #2240). Here the entry of
 * the section that holds the *reading line* (30% down the window) is lit: the sections
 * follow each other with no gaps, so exactly the sections around the line intersect a
 * 1 px band there, whatever the scroll did to get there. At the very bottom of the page
 * the last entry whose section is on screen is lit (a short last section never
 * reaches the line). After a jump (a contents entry, a link, a fragment in the
 * address) the target's entry stays lit until the reader scrolls on.
 *
 * The theme's own syncing starts from the id #pst-page-toc-nav; this script runs first
 * (both are deferred, this one comes first in the page) and renames the nav so the
 * theme finds none and the two never fight. _ext/README.md lists this patch;
 * tests/test_reader_edges.py checks the highlight at several scroll positions and
 * that the theme's code still looks the nav up by that id.
 *
 * On a phone the contents open in a modal <dialog>; a tapped entry scrolled the page
 * behind it and left the dialog over the section. An in-page link in a sidebar dialog
 * now closes the dialog first (the theme then moves the contents back to the sidebar),
 * and the browser scrolls to the section as usual.
 */
(function () {
  const READING_LINE = 0.3; // fraction of the window height, from the top
  const PIN_SLACK = 40; // px a reader may scroll before a jump's target stops being pinned

  function setup() {
    const nav = document.getElementById("pst-page-toc-nav");
    if (nav) {
      nav.id = "selfattn-page-toc-nav"; // the theme's syncing looks for the old id
      follow(nav);
    }
    closeDialogsOnInPageLinks();
  }

  function follow(nav) {
    const links = Array.from(nav.querySelectorAll("a[href^='#']"));
    const entries = Array.from(nav.querySelectorAll("li"));
    const sections = []; // document order, the same as the contents' order
    const linkOf = new Map();
    links.forEach((link) => {
      const target = document.getElementById(decodeURIComponent(link.hash.slice(1)));
      if (target) {
        sections.push(target);
        linkOf.set(target, link);
      }
    });
    if (!sections.length) return;
    const crossing = new Set();
    let pinned = null; // {target, y}: a jump's target, lit until the reader scrolls on
    let shown;

    function light(link) {
      if (link === shown) return;
      shown = link;
      links.forEach((a) => {
        a.classList.toggle("active", a === link);
        if (a === link) a.setAttribute("aria-current", "true");
        else a.removeAttribute("aria-current");
      });
      entries.forEach((li) => li.classList.toggle("active", !!link && li.contains(link)));
    }

    function atBottom() {
      const root = document.documentElement;
      return window.scrollY + window.innerHeight >= root.scrollHeight - 2;
    }

    function update() {
      if (pinned && Math.abs(window.scrollY - pinned.y) <= PIN_SLACK) {
        return light(linkOf.get(pinned.target));
      }
      pinned = null;
      if (atBottom()) {
        const onScreen = sections.filter((s) => s.getBoundingClientRect().top < window.innerHeight);
        if (onScreen.length) return light(linkOf.get(onScreen[onScreen.length - 1]));
      }
      // the deepest (last in document order) section that holds the reading line
      let current = null;
      sections.forEach((s) => { if (crossing.has(s)) current = s; });
      light(current ? linkOf.get(current) : null);
    }

    let observer = null;
    function observe() {
      if (observer) observer.disconnect();
      crossing.clear();
      const line = Math.round(window.innerHeight * READING_LINE);
      const below = Math.max(0, window.innerHeight - line - 1);
      observer = new IntersectionObserver((changes) => {
        changes.forEach((c) => {
          if (c.isIntersecting) crossing.add(c.target);
          else crossing.delete(c.target);
        });
        update();
      }, { rootMargin: `-${line}px 0px -${below}px 0px`, threshold: 0 });
      sections.forEach((s) => observer.observe(s));
    }

    function pin(hash) {
      const target = sections.find((s) => "#" + s.id === decodeURIComponent(hash));
      if (!target) return;
      // after the browser has scrolled to the target
      requestAnimationFrame(() => requestAnimationFrame(() => {
        pinned = { target, y: window.scrollY };
        update();
      }));
    }

    let frame = 0;
    window.addEventListener("scroll", () => {
      if (!frame) frame = requestAnimationFrame(() => { frame = 0; update(); });
    }, { passive: true });
    let resized = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resized);
      resized = setTimeout(observe, 150);
    });
    window.addEventListener("hashchange", () => pin(location.hash));
    document.addEventListener("click", (event) => {
      const link = event.target.closest && event.target.closest("a[href*='#']");
      if (link && link.pathname === location.pathname && link.hash === location.hash) {
        pin(link.hash); // same fragment again: no hashchange
      }
    });
    observe();
    if (location.hash) pin(location.hash);
  }

  function closeDialogsOnInPageLinks() {
    ["pst-primary-sidebar-modal", "pst-secondary-sidebar-modal"].forEach((id) => {
      const dialog = document.getElementById(id);
      if (!dialog) return;
      dialog.addEventListener("click", (event) => {
        const link = event.target.closest && event.target.closest("a[href]");
        if (link && dialog.open && link.hash && link.pathname === location.pathname) {
          dialog.close(); // the link's own navigation (the scroll) follows
        }
      });
    });
  }

  if (document.readyState !== "loading") setup();
  else document.addEventListener("DOMContentLoaded", setup);
})();

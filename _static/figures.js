/* Figures stay readable on a phone.
 *
 * Figures are SVG with their text kept as text (selfattn.plotting.use_book_style).
 * A browser shrinks a figure to the column; a figure drawn wide (two or three panels
 * side by side) would then show its labels at 5-7 CSS px on a 390 px phone. The book
 * draws every figure at most 5.5 in wide with text of at least 10.5 pt, so on a 390 px
 * phone (a 342 px figure box) it fits with its text at >= 9 CSS px and this script
 * changes nothing; it is the safety net for a narrower screen or a figure that breaks
 * the rule. Rule: no figure text is rendered below MIN_TEXT_PX. For each figure this
 * script reads the SVG's smallest font size (in SVG user units) and its viewBox width, and gives the
 * image the minimum width at which that text is MIN_TEXT_PX; a figure that then does
 * not fit the column scrolls sideways inside its own box (.selfattn-figure-scroll),
 * like a wide table. tests/test_reader.py measures the same rule in the browser.
 */
(function () {
  const MIN_TEXT_PX = 9;  // the same floor as tests/test_reader.py

  function smallestFont(svg) {
    let smallest = Infinity;
    svg.querySelectorAll("text, tspan").forEach((t) => {
      const style = (t.getAttribute("style") || "") + ";font-size:" + (t.getAttribute("font-size") || "");
      const m = style.match(/font(?:-size)?:[^;]*?([\d.]+)px/);
      if (m) smallest = Math.min(smallest, parseFloat(m[1]));
    });
    return smallest;
  }

  async function fit(img) {
    try {
      const text = await (await fetch(img.currentSrc || img.src)).text();
      const svg = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
      const viewBox = (svg.getAttribute("viewBox") || "").split(/[\s,]+/).map(Number);
      const font = smallestFont(svg);
      if (viewBox.length !== 4 || !isFinite(font) || font <= 0) return;
      const minWidth = Math.ceil((viewBox[2] * MIN_TEXT_PX) / font);
      img.style.minWidth = minWidth + "px";
      img.dataset.minTextPx = String(MIN_TEXT_PX);
      const box = img.parentElement;
      if (box && !box.classList.contains("selfattn-figure-scroll")) {
        box.classList.add("selfattn-figure-scroll");
      }
      return box;
    } catch (err) {
      return null; /* a figure that cannot be read is left as it is */
    }
  }

  // Figures load lazily (loading="lazy"): each is measured once it has loaded, so a
  // figure far down the page costs nothing until the reader nears it (the fetch
  // below then comes from the cache). Its box then gets its scroll hint at once.
  function refreshHints(boxes) {
    const fitted = boxes.filter(Boolean);
    if (fitted.length && window.selfattnScrollHints) window.selfattnScrollHints(fitted);
  }

  function whenLoaded(img) {
    new Promise((resolve) => {
      img.addEventListener("load", () => fit(img).then(resolve), { once: true });
      img.addEventListener("error", () => resolve(null), { once: true });
    }).then((box) => refreshHints([box]));
  }

  function setup() {
    const figures = Array.from(document.querySelectorAll(".cell_output img[src$='.svg']"));
    Promise.all(figures.filter((img) => img.complete).map(fit)).then(refreshHints);
    figures.filter((img) => !img.complete).forEach(whenLoaded);
  }
  if (document.readyState !== "loading") setup();
  else document.addEventListener("DOMContentLoaded", setup);
})();

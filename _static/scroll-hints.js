/* Boxes that scroll sideways say so.
 *
 * Wide matrices, code and display equations scroll inside their own box on a
 * phone. Without a hint a reader cannot tell that a table goes on to the right. This
 * script marks every such box that has hidden content on a side (class sa-more-right /
 * sa-more-left, updated as it scrolls); custom.css fades that edge out, so the cut-off
 * column is visibly cut off. A box that scrolls also takes keyboard focus (tabindex=0).
 *
 * Measuring a box (scrollWidth) lays it out. A chapter has hundreds of boxes, most far
 * below the screen in sections the browser has not laid out yet (custom.css,
 * content-visibility), so measuring them all at load cost 0.3-0.5 s of main thread on
 * 04-whys, again at every resize and every figure load. Instead each box is measured
 * when it comes within a screen of the viewport (IntersectionObserver), reads before
 * writes, so a batch costs one layout. The first Tab key press measures every box, so
 * a keyboard reader can reach each box that scrolls. tests/test_reader_phone.py checks the
 * fade on every scrollable box and that boxes are marked as the reader scrolls to them.
 */
(function () {
  const SELECTOR = [
    "div.highlight pre",
    "div.cell_output pre",
    ".selfattn-matrix",
    "div.math",
    ".pst-scrollable-table-container",
    ".table-wrapper",
  ].join(",");
  const near = new Set(); // boxes within a screen of the viewport

  function measure(boxes) {
    // every read first, then every write: one layout for the batch, not one per box
    const sizes = boxes.map((box) => [box.scrollWidth - box.clientWidth, box.scrollLeft]);
    boxes.forEach((box, i) => {
      const [hidden, left] = sizes[i];
      const scrollable = hidden > 1;
      box.classList.toggle("sa-scrollable", scrollable);
      box.classList.toggle("sa-more-left", scrollable && left > 1);
      box.classList.toggle("sa-more-right", scrollable && left < hidden - 1);
      // a keyboard can scroll it too (axe: scrollable-region-focusable)
      if (scrollable && !box.hasAttribute("tabindex")) box.tabIndex = 0;
    });
  }

  const observer = "IntersectionObserver" in window
    ? new IntersectionObserver((entries) => {
      const arrived = [];
      entries.forEach((entry) => {
        if (entry.isIntersecting) {
          near.add(entry.target);
          arrived.push(entry.target);
        } else {
          near.delete(entry.target);
        }
      });
      measure(arrived);
    }, { rootMargin: "100% 0px" })
    : null;

  function watchBox(box) {
    if (box.dataset.saHint) return;
    box.dataset.saHint = "1";
    box.addEventListener("scroll", () => measure([box]), { passive: true });
    if (observer) observer.observe(box);
  }

  function watch() {
    const boxes = Array.from(document.querySelectorAll(SELECTOR));
    boxes.forEach(watchBox);
    return boxes;
  }

  // selfattnScrollHints(): measure every box now (keyboard, tests);
  // selfattnScrollHints([box, ...]): those boxes.
  window.selfattnScrollHints = (boxes) => {
    if (!boxes) return measure(watch());
    boxes.forEach(watchBox);
    return measure(boxes);
  };

  function start() {
    const boxes = watch();
    if (!observer) measure(boxes); // an old browser: every box now, as before
  }
  if (document.readyState !== "loading") start();
  else document.addEventListener("DOMContentLoaded", start);
  // fonts and figures change widths: measure again what the reader can reach now;
  // a box further away is measured when it comes near
  const again = () => measure(Array.from(near));
  window.addEventListener("load", again);
  window.addEventListener("resize", again);
  // a section's fonts (KaTeX's larger delimiters, say) load when it is first drawn
  if (document.fonts) document.fonts.addEventListener("loadingdone", again);
  document.addEventListener("keydown", function onTab(event) {
    if (event.key !== "Tab") return;
    document.removeEventListener("keydown", onTab);
    measure(watch());
  });
})();

/* Interactive figures (selfattn.interactive): render every div.selfattn-vega.
 *
 * Each div holds a Vega-Lite spec as JSON (computed at build time from selfattn's
 * numbers) and a static fallback image. This script renders the spec with
 * vega-embed (served from _static/vega, no CDN): SVG renderer, no action menu,
 * the dark theme when the page is dark. Sliders, checkboxes and selects are native
 * <input>/<select> elements, so the keyboard works. Once the chart is drawn the
 * fallback is hidden (CSS: .selfattn-vega-ready). A theme switch re-renders the
 * chart, keeping the slider and toggle values. Tests reach the view as el.vegaView
 * and the compiled Vega spec as el.vegaSpec.
 *
 * A fine slider (more than FINE_STEPS steps: the temperature's 100 steps fit in 129 px on
 * a 390 px phone) gets tick marks (a <datalist>) at its starting value and at every whole
 * number in its range, the values the text discusses (T = 1, 2, 4, ...). A thumb dragged
 * (pointer, finger) to within SNAP_PX of a tick lands on it; the keyboard still moves one
 * step at a time, so a step off a tick is never undone.
 */
(function () {
  const CONCAT_AXIS_ROOM = 84;
  const FINE_STEPS = 20;
  const SNAP_PX = 6;
  function isDark() {
    return document.documentElement.dataset.theme === "dark";
  }

  function paramValues(el) {
    const values = {};
    if (!el.vegaView) return values;
    (el.selfattnSpec.params || []).forEach((p) => {
      try { values[p.name] = el.vegaView.signal(p.name); } catch (err) { /* not a signal */ }
    });
    return values;
  }

  async function render(el) {
    if (!el.selfattnSpec) {
      el.selfattnSpec = JSON.parse(el.querySelector("script.selfattn-vega-spec").textContent);
    }
    const kept = paramValues(el);
    const spec = JSON.parse(JSON.stringify(el.selfattnSpec));
    (spec.params || []).forEach((p) => { if (p.name in kept) p.value = kept[p.name]; });
    const dark = isDark();
    if (el.vegaView) el.vegaView.finalize();
    const box = el.querySelector(".selfattn-vega-chart");
    box.innerHTML = "";
    // the chart is as wide as its box now ("fit-x"); a ResizeObserver redraws it when the
    // box changes width (sidebars, rotation), so it never overflows the column
    const width = Math.floor(el.getBoundingClientRect().width);
    if (spec.width === "container" && width > 0) spec.width = width;
    // stacked panels (vconcat): Vega-Lite cannot fit them to a width, so each panel's plot
    // gets the box's width less room for its y axis (CONCAT_AXIS_ROOM px)
    (spec.vconcat || []).forEach((panel) => {
      if (panel.width === "container" && width > 0) {
        panel.width = Math.max(120, width - CONCAT_AXIS_ROOM);
      }
    });
    el.drawnWidth = width;
    const result = await vegaEmbed(box, spec, {
      mode: "vega-lite",
      actions: false,
      renderer: "svg",
      theme: dark ? "dark" : undefined,
      // the page's background shows through; text marks follow the theme's text colour
      config: { background: null, text: { color: dark ? "#e8e8e8" : "#222222" } },
    });
    el.vegaView = result.view;
    el.vegaSpec = result.vgSpec;
    addTicks(el, box);
    el.dataset.theme = dark ? "dark" : "light";
    el.classList.add("selfattn-vega-ready");
  }

  // tick marks, and snapping to them while dragging, on every fine slider of the figure
  let datalists = 0;
  function addTicks(el, box) {
    (el.selfattnSpec.params || []).forEach((p) => {
      const bind = p.bind || {};
      if (bind.input !== "range") return;
      const input = Array.from(box.querySelectorAll("input[type=range]"))
        .find((i) => i.name === p.name);
      const [min, max, step] = [bind.min, bind.max, bind.step].map(Number);
      if (!input || !(step > 0) || (max - min) / step <= FINE_STEPS) return;
      const ticks = [p.value];
      for (let v = Math.ceil(min); v <= max; v += 1) ticks.push(v);
      const values = Array.from(new Set(ticks.filter((v) => v >= min && v <= max)))
        .sort((a, b) => a - b);
      const list = document.createElement("datalist");
      list.id = `selfattn-ticks-${++datalists}`;
      values.forEach((v) => {
        const option = document.createElement("option");
        option.value = String(v);
        list.appendChild(option);
      });
      input.after(list);
      input.setAttribute("list", list.id);
      let dragging = false;
      input.addEventListener("pointerdown", () => { dragging = true; });
      ["pointerup", "pointercancel", "lostpointercapture"].forEach((type) => {
        input.addEventListener(type, () => { dragging = false; });
      });
      input.addEventListener("input", () => {
        if (!dragging) return;  // the keyboard moves by steps, never snapped back
        const value = Number(input.value);
        const radius = (max - min) * SNAP_PX / Math.max(1, input.clientWidth);
        const near = values.find((v) => Math.abs(v - value) <= radius);
        if (near === undefined || near === value) return;
        input.value = String(near);
        input.dispatchEvent(new Event("input", { bubbles: true }));  // Vega reads it
      });
    });
  }

  // one render at a time per figure: a theme switch or resize during a render waits for it
  function schedule(el) {
    el.selfattnQueue = (el.selfattnQueue || Promise.resolve())
      .then(() => render(el))
      .catch((err) => console.error("interactive figure failed:", err));
  }

  function renderAll() {
    document.querySelectorAll("div.selfattn-vega").forEach((el) => {
      schedule(el);
    });
  }

  const resized = new ResizeObserver((entries) => {
    entries.forEach((entry) => {
      const el = entry.target;
      const width = Math.floor(el.getBoundingClientRect().width);
      if (el.vegaView && width > 0 && Math.abs(width - el.drawnWidth) > 1) {
        schedule(el);
      }
    });
  });

  function setup() {
    if (typeof vegaEmbed === "undefined") return;  // fallback stays visible
    renderAll();
    document.querySelectorAll("div.selfattn-vega").forEach((el) => resized.observe(el));
    new MutationObserver(() => {
      document.querySelectorAll("div.selfattn-vega.selfattn-vega-ready").forEach((el) => {
        if (el.dataset.theme !== (isDark() ? "dark" : "light")) {
          schedule(el);
        }
      });
    }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  }

  if (document.readyState !== "loading") setup();
  else document.addEventListener("DOMContentLoaded", setup);
})();

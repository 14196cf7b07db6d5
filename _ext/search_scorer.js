/* Search that sends a reader to the page that teaches (conf.py: html_search_scorer;
 * Sphinx puts this file into language_data.js, which the search page loads after
 * searchtools.js, so `Search` is defined here).
 *
 * What Sphinx does alone, and why it sent readers to the wrong page:
 * - a section title counts as a hit only when it contains the query verbatim and the
 *   query is at least half its length: "induction head" missed "Induction heads: how
 *   a model learns to copy", "sliding window" missed "Sliding windows and the rolling
 *   cache", so the glossary entry (an index entry, score 100) and the API came first;
 * - excerpts were cut from the page's <main>, which holds the theme's menus ("System
 *   Settings Light Dark") and the contents list, starting at the *last* query word's
 *   first occurrence anywhere in it.
 *
 * Here:
 * 1. Titles match by words, stemmed as Sphinx stems the index: every query word is a
 *    word of the title (or starts one). Matching titles rank above every other kind
 *    of result, in this order:
 *      a. titles in the chapter that teaches the term: the chapter where the book
 *         first links the glossary term the query names (_ext/search_teaching.py);
 *      b. that first link's own section, when no title of its chapter matches;
 *      c. page titles, then d. section titles, elsewhere.
 *    Within a class: the closer match (query words / title words), then the page
 *    title before its sections, then the earlier chapter (the book teaches in order).
 * 2. Everything else keeps Sphinx's order below them: index entries (the glossary),
 *    the API's objects (an exact name like `alibi_bias` still finds its entry first,
 *    as no title holds it), then pages that only mention the words.
 * 3. Excerpts are the article's own prose: the first paragraph (or list item,
 *    caption, table cell) of the result's section that holds all the query words,
 *    else the most of them, cut to about 240 characters around the first match.
 *    Code cells, their outputs, typeset math's MathML copy and contents lists are
 *    left out.
 * tests/test_reader_search.py checks the ranks of a list of queries and the excerpts.
 */
(function () {
  const TITLE_BASE = 300;  // above every index entry (<= 100) and object score
  const TAUGHT = 200;  // a title in the chapter that teaches the term
  const FIRST_USE = 150;  // the section of the term's first link (no title matched)
  const PAGE = 100;  // a page title, elsewhere
  if (typeof Search === "undefined") return;  // not the search page

  const stemmer = typeof Stemmer !== "undefined" ? new Stemmer() : { stemWord: (w) => w };
  const words = (text) => splitQuery(text.toLowerCase())
    .filter((w) => !stopwords.has(w) && !/^\d+$/.test(w));
  const stems = (text) => words(text).map((w) => stemmer.stemWord(w));
  // a query word matches a title word when their stems agree, or the title word starts
  // with it (3 letters or more: "soft" finds "soft-capping" and "softmax")
  const matches = (queryWord, queryStem, titleWords, titleStems) =>
    titleStems.includes(queryStem)
    || (queryWord.length >= 3 && titleWords.some((w) => w.startsWith(queryWord)));

  function teaching() {
    const data = window.SELFATTN_TEACHING || { order: [], firstUse: {} };
    return data;
  }

  /* The chapters (docnames) and first-link sections of the glossary terms the query
   * names: the terms whose words are exactly the query's, else those that hold all
   * of the query's words ("latent" names "multi-head latent attention"). */
  function taughtAt(qWords, qStems) {
    const exact = [];
    const holding = [];
    for (const [term, where] of Object.entries(teaching().firstUse)) {
      const tWords = words(term);
      const tStems = tWords.map((w) => stemmer.stemWord(w));
      if (!qWords.every((w, i) => matches(w, qStems[i], tWords, tStems))) continue;
      const same = tStems.length === qStems.length;
      (same ? exact : holding).push(where);
    }
    return exact.length ? exact : holding;
  }

  function titleResults(query) {
    const index = Search._index;
    const qWords = words(query);
    const qStems = qWords.map((w) => stemmer.stemWord(w));
    if (!qWords.length) return [];
    const order = teaching().order;
    const rank = (doc) => (order.indexOf(doc) < 0 ? order.length : order.indexOf(doc));
    const taught = taughtAt(qWords, qStems);
    const taughtDocs = new Set(taught.map(([doc]) => doc));
    const docIndex = new Map(index.docnames.map((d, i) => [d, i]));
    const results = [];
    const matchedDocs = new Set();
    for (const [title, found] of Object.entries(index.alltitles)) {
      const tWords = words(title);
      const tStems = tWords.map((w) => stemmer.stemWord(w));
      if (!qWords.every((w, i) => matches(w, qStems[i], tWords, tStems))) continue;
      const coverage = qWords.length / Math.max(tWords.length, 1);
      for (const [file, id] of found) {
        const doc = index.docnames[file];
        const isPage = index.titles[file] === title;
        let score = TITLE_BASE + 10 * coverage + (isPage ? 1 : 0) - rank(doc) / 100;
        if (taughtDocs.has(doc)) {
          score += TAUGHT;
          matchedDocs.add(doc);
        } else if (isPage) score += PAGE;
        results.push([doc, isPage ? title : `${index.titles[file]} > ${title}`,
          id && !isPage ? "#" + id : "", null, score, index.filenames[file], "title"]);
      }
    }
    for (const [doc, anchor] of taught) {
      const file = docIndex.get(doc);
      if (file === undefined || matchedDocs.has(doc)) continue;
      let title = index.titles[file];
      if (anchor) {  // the section's own title, as Sphinx lists it
        for (const [t, found] of Object.entries(index.alltitles)) {
          if (found.some(([f, id]) => f === file && id === anchor)) title = `${title} > ${t}`;
        }
      }
      results.push([doc, title, anchor ? "#" + anchor : "", null,
        TITLE_BASE + FIRST_USE - rank(doc) / 100, index.filenames[file], "title"]);
    }
    return results;
  }

  // Sphinx's title results are replaced by ours; other kinds keep their scores.
  const sphinxSearch = Search._performSearch;
  Search._performSearch = (query, searchTerms, excludedTerms, highlightTerms, objectTerms) => {
    const theirs = sphinxSearch(query, searchTerms, excludedTerms, highlightTerms, objectTerms)
      .filter((r) => r[6] !== "title");
    const ours = titleResults(query);
    // a page already listed for its title or a section is not listed again as a mere
    // mention (a "text" result: the page, no anchor)
    const ourDocs = new Set(ours.map((r) => r[0]));
    const rest = theirs.filter((r) => !(r[6] === "text" && ourDocs.has(r[0])));
    const all = [...rest, ...ours];
    all.sort(_orderResultsByScoreThenName);  // ascending: the page shows the last first
    return all;
  };

  /* --- excerpts ------------------------------------------------------------------ */
  const LEFT_OUT = ".headerlink, script, style, .katex-mathml, div.cell, .toctree-wrapper, "
    + "nav, .contents, .selfattn-vega, .sd-tab-set";
  const PROSE = "p, dt, figcaption, h1, h2, h3, h4, th, td, li:not(:has(p)), dd:not(:has(p))";

  function proseBlocks(htmlString, anchor) {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    const article = doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
    if (!article) return [];
    article.querySelectorAll(LEFT_OUT).forEach((el) => el.remove());
    let scope = article;
    if (anchor) {
      const id = decodeURIComponent(anchor.replace(/^#/, ""));
      scope = Array.from(article.querySelectorAll("[id]")).find((el) => el.id === id) || article;
      if (scope.tagName === "SPAN" && scope.parentElement) scope = scope.parentElement;
    }
    return Array.from(scope.querySelectorAll(PROSE))
      .map((el) => ({ heading: /^H\d$/.test(el.tagName),
        text: el.textContent.replace(/\s+/g, " ").trim() }))
      .filter((b) => b.text);
  }

  Search.htmlToText = (htmlString, anchor) =>
    proseBlocks(htmlString, anchor).map((b) => b.text).join(" ");

  Search.makeSearchSummary = (htmlText, keywords, anchor) => {
    const keys = [...keywords].map((k) => k.toLowerCase());
    const blocks = proseBlocks(htmlText, anchor);
    if (!blocks.length) return null;
    const count = (b) => keys.filter((k) => b.text.toLowerCase().includes(k)).length;
    let best = null;
    for (const b of blocks) {  // the first block with the most words, prose before titles
      const n = count(b) - (b.heading ? 0.5 : 0);
      if (best === null || n > best.n) best = { b, n };
      if (n === keys.length) break;
    }
    const text = best.b.text;
    const lower = text.toLowerCase();
    const at = Math.min(...keys.map((k) => lower.indexOf(k)).filter((i) => i >= 0), text.length);
    let start = at > 100 ? text.lastIndexOf(" ", at - 80) + 1 : 0;
    let end = Math.min(text.length, start + 240);
    if (end < text.length) end = Math.max(text.lastIndexOf(" ", end), at + 1);
    const summary = document.createElement("p");
    summary.classList.add("context");
    summary.textContent = (start > 0 ? "… " : "") + text.slice(start, end).trim()
      + (end < text.length ? " …" : "");
    return summary;
  };
})();

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
  // Bonuses, one per class (a result takes its best); the classes are 50 apart, more
  // than the reading-order term (<= 20) and the tie-breaks (< 1) can make up.
  const TITLE_BASE = 300;  // above every index entry (<= 100) and object score
  const TAUGHT_TITLE = 250;  // a title in the chapter that first links the query's term
  const FIRST_USE = 200;  // that first link's section, when no title of its chapter matches
  const PAGE = 150;  // a page title
  const TAUGHT_WIDER = 100;  // a title in the chapter of a longer term holding the query
  const FIRST_USE_WIDER = 50;  // ... or that term's first link
  if (typeof Search === "undefined") return;  // not the search page

  const stemmer = typeof Stemmer !== "undefined" ? new Stemmer() : { stemWord: (w) => w };
  // Sphinx's stop words include "why", "how", "what": in a title they are what the
  // section asks ("Why scale by 1/sqrt(d_k)"), so only articles, prepositions and the
  // like are dropped here.
  const FUNCTION_WORDS = new Set(["a", "an", "the", "and", "or", "of", "in", "on", "at",
    "to", "for", "with", "by", "from", "into", "is", "are", "be", "as", "it", "its"]);
  const words = (text) => splitQuery(text.toLowerCase())
    .filter((w) => !FUNCTION_WORDS.has(w) && !/^\d+$/.test(w));
  // a query word matches a title word when their stems agree, or the title word starts
  // with it (3 letters or more: "soft" finds "soft-capping" and "softmax")
  const matches = (queryWord, queryStem, titleWords, titleStems) =>
    titleStems.includes(queryStem)
    || (queryWord.length >= 3 && titleWords.some((w) => w.startsWith(queryWord)));

  function teaching() {
    const data = window.SELFATTN_TEACHING || { order: [], firstUse: {} };
    return data;
  }

  /* [chapter, section id] of the first link to each glossary term the query names:
   * with exact, the terms whose words are the query's; else the longer terms that hold
   * all of the query's words ("latent" is in "multi-head latent attention"). */
  function taughtAt(qWords, qStems, exact) {
    const found = [];
    for (const [term, where] of Object.entries(teaching().firstUse)) {
      const tWords = words(term);
      const tStems = tWords.map((w) => stemmer.stemWord(w));
      if (!qWords.every((w, i) => matches(w, qStems[i], tWords, tStems))) continue;
      if ((tStems.length === qStems.length) === exact) found.push(where);
    }
    return found;
  }

  function titleResults(query) {
    const index = Search._index;
    const qWords = words(query);
    const qStems = qWords.map((w) => stemmer.stemWord(w));
    if (!qWords.length) return [];
    const order = teaching().order;
    // earlier chapters first (the book teaches in order); other pages after them
    const early = (doc) => 20 - (order.indexOf(doc) < 0 ? order.length : order.indexOf(doc));
    const exact = taughtAt(qWords, qStems, true);
    const wider = exact.length ? [] : taughtAt(qWords, qStems, false);
    const exactDocs = new Set(exact.map(([doc]) => doc));
    const widerDocs = new Set(wider.map(([doc]) => doc));
    const docIndex = new Map(index.docnames.map((d, i) => [d, i]));
    const results = [];
    const titled = new Set();  // chapters with a matching title
    for (const [title, found] of Object.entries(index.alltitles)) {
      const tWords = words(title);
      const tStems = tWords.map((w) => stemmer.stemWord(w));
      if (!qWords.every((w, i) => matches(w, qStems[i], tWords, tStems))) continue;
      const coverage = qWords.length / Math.max(tWords.length, 1);
      for (const [file, id] of found) {
        const doc = index.docnames[file];
        const isPage = index.titles[file] === title;
        const bonus = Math.max(exactDocs.has(doc) ? TAUGHT_TITLE : 0, isPage ? PAGE : 0,
          widerDocs.has(doc) ? TAUGHT_WIDER : 0);
        titled.add(doc);
        results.push([doc, isPage ? title : `${index.titles[file]} > ${title}`,
          id && !isPage ? "#" + id : "", null,
          TITLE_BASE + bonus + early(doc) + (isPage ? 0.5 : 0) + 0.4 * coverage,
          index.filenames[file], "title"]);
      }
    }
    for (const [where, bonus] of [[exact, FIRST_USE], [wider, FIRST_USE_WIDER]]) {
      for (const [doc, anchor] of where) {
        const file = docIndex.get(doc);
        if (file === undefined || titled.has(doc)) continue;
        let title = index.titles[file];
        if (anchor) {  // the section's own title, as Sphinx lists it
          for (const [t, found] of Object.entries(index.alltitles)) {
            if (found.some(([f, id]) => f === file && id === anchor)) title = `${title} > ${t}`;
          }
        }
        results.push([doc, title, anchor ? "#" + anchor : "", null,
          TITLE_BASE + bonus + early(doc), index.filenames[file], "title"]);
      }
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

  function blocksOf(htmlString, anchor, code) {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    const article = doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
    if (!article) return [];
    article.querySelectorAll(code ? CODE_LEFT_OUT : LEFT_OUT).forEach((el) => el.remove());
    let scope = article;
    if (anchor) {
      const id = decodeURIComponent(anchor.replace(/^#/, ""));
      scope = Array.from(article.querySelectorAll("[id]")).find((el) => el.id === id) || article;
      if (scope.tagName === "SPAN" && scope.parentElement) scope = scope.parentElement;
    }
    if (code) {  // each line of the cells' code
      return Array.from(scope.querySelectorAll("div.cell_input pre"))
        .flatMap((pre) => pre.textContent.split("\n"))
        .map((line) => ({ heading: false, text: line.trim() })).filter((b) => b.text);
    }
    // a term or an API entry (the anchor is its <dt>): the term and its definition
    const blocks = scope.tagName === "DT"
      ? [scope, ...(scope.nextElementSibling ? [scope.nextElementSibling] : [])]
      : Array.from(scope.querySelectorAll(PROSE));
    return blocks
      .map((el) => ({ heading: /^H\d$/.test(el.tagName),
        text: el.textContent.replace(/\s+/g, " ").trim() }))
      .filter((b) => b.text);
  }
  const CODE_LEFT_OUT = ".headerlink, script, style, div.cell_output";

  Search.htmlToText = (htmlString, anchor) =>
    blocksOf(htmlString, anchor, false).map((b) => b.text).join(" ");

  /* The block that best holds the query's words: the most of them, the longer words
   * weighing more ("norm" over "qk"), prose before titles, the first of equals. */
  function bestBlock(blocks, keys) {
    let best = null;
    for (const b of blocks) {
      const lower = b.text.toLowerCase();
      const hit = keys.filter((k) => new RegExp("(^|[^\\p{L}\\p{N}])" + _escapeRegExp(k), "u")
        .test(lower));
      const n = hit.length + hit.reduce((s, k) => s + k.length, 0) / 100 - (b.heading ? 0.5 : 0);
      if (hit.length && (best === null || n > best.n)) best = { b, n };
    }
    return best && best.b;
  }

  Search.makeSearchSummary = (htmlText, keywords, anchor) => {
    const keys = [...keywords].map((k) => k.toLowerCase());
    const prose = blocksOf(htmlText, anchor, false);
    // the prose that holds the most of the words; a line of code when it holds more (an
    // API name, a word only the code uses)
    const said = bestBlock(prose, keys);
    const coded = bestBlock(blocksOf(htmlText, anchor, true), keys);
    const hits = (b) => (b ? keys.filter((k) => b.text.toLowerCase().includes(k)).length : 0);
    const block = (hits(coded) > hits(said) ? coded : said) || prose[0];
    if (!block) return null;
    const text = block.text;
    const lower = text.toLowerCase();
    const at = Math.min(...keys.map((k) => lower.indexOf(k)).filter((i) => i >= 0), text.length);
    const start = at > 100 ? text.lastIndexOf(" ", at - 80) + 1 : 0;
    let end = Math.min(text.length, start + 240);
    if (end < text.length) end = Math.max(text.lastIndexOf(" ", end), at + 1);
    const summary = document.createElement("p");
    summary.classList.add("context");
    summary.textContent = (start > 0 ? "… " : "") + text.slice(start, end).trim()
      + (end < text.length ? " …" : "");
    return summary;
  };
})();

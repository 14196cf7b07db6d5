/* Search ranking (conf.py: html_search_scorer; Sphinx puts this into language_data.js,
 * which every page loads after searchtools.js).
 *
 * Sphinx scores a section title that contains the query at 15 x (query length / title
 * length), at most 16, but an index entry equal to the query at 100: "online softmax"
 * listed the glossary's entry and the API page above the section "The online softmax"
 * (4th). A reader who types a topic wants the section that teaches it, so a title result
 * (a section or page whose title holds the whole query) ranks above index entries and
 * objects; among titles the closer match still wins. tests/test_reader_edges.py checks
 * the order.
 */
(function () {
  const TITLE_BONUS = 200;  // above every index entry (<= 100) and object score
  const scorer = typeof Scorer !== "undefined" ? Scorer : (window.Scorer = {});
  scorer.score = (result) => {
    const [, , , , score, , kind] = result;
    return kind === "title" ? score + TITLE_BONUS : score;
  };
})();

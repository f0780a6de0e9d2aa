// Long code names (over 16 characters) in table cells, such as
// MONARCH_RDMA_TCP_FALLBACK_PARALLELISM or monarch_transport.ChannelTransport,
// may wrap after "_", "." or "/", never inside a word: a <wbr> goes after
// each, which copying leaves out. Shorter names stay whole
// (stylesheets/extra.css), so a table fits its page without cutting a name.
// document$ is Material's page-load signal, instant navigation included.
document$.subscribe(function () {
  document.querySelectorAll(".md-typeset table:not([class]) td code").forEach(function (code) {
    if (code.dataset.wbr || code.textContent.length <= 16) return;
    code.dataset.wbr = "1";
    code.style.whiteSpace = "normal";  // the first column's names are kept on one line otherwise
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    const texts = [];
    while (walker.nextNode()) texts.push(walker.currentNode);
    texts.forEach(function (node) {
      const parts = node.nodeValue.split(/(?<=[_./])(?=[^_./])/);
      if (parts.length < 2) return;
      const pieces = document.createDocumentFragment();
      parts.forEach(function (part, i) {
        if (i) pieces.appendChild(document.createElement("wbr"));
        pieces.appendChild(document.createTextNode(part));
      });
      node.parentNode.replaceChild(pieces, node);
    });
  });
});

// Long code names in table cells (MONARCH_RDMA_TCP_FALLBACK_PARALLELISM,
// monarch_transport.ChannelTransport) may wrap after "_", "." or "/", never
// inside a word: a <wbr> goes after each, which copying leaves out. The first
// column keeps its names on one line (stylesheets/extra.css).
// document$ is Material's page-load signal, instant navigation included.
document$.subscribe(function () {
  document.querySelectorAll(".md-typeset table:not([class]) td:not(:first-child) code").forEach(function (code) {
    if (code.dataset.wbr) return;
    code.dataset.wbr = "1";
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

// Injected into a built page by docs_layout.py: measures the layout once the theme's scripts ran
// (they wrap tables in scroll containers on load), and writes what is wrong into #anarchon-layout.
window.addEventListener("load", () => setTimeout(() => {
  const problems = [];
  const text = (el) => el.textContent.trim().replace(/\s+/g, " ").slice(0, 80);
  for (const el of document.querySelectorAll("article pre:not([data-diagram]) > code")) {
    if (el.scrollWidth > el.clientWidth + 1) {
      const longest = el.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "");
      problems.push(
        `code clipped (${el.scrollWidth} px in ${el.clientWidth} px): ${longest.trim().slice(0, 80)}`);
    }
  }
  for (const el of document.querySelectorAll("article .md-typeset__scrollwrap")) {
    if (el.scrollWidth > el.clientWidth + 1) {
      problems.push(`table clipped (${el.scrollWidth} px in ${el.clientWidth} px): ${text(el.querySelector("tr"))}`);
    }
  }
  // Code in a table may wrap between words, never inside one.
  for (const el of document.querySelectorAll("article table code")) {
    const node = el.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) continue;
    for (const word of node.data.matchAll(/\S+/g)) {
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) problems.push(`code broken inside a word in a table: ${word[0]}`);
    }
  }
  const out = document.createElement("pre");
  out.id = "anarchon-layout";
  out.textContent = JSON.stringify(problems);
  document.body.appendChild(out);
}, 100));

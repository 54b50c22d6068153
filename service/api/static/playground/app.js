// ragserve playground: search (with thumbs to rate a hit), context, ingest jobs, grounded chat and a quality
// summary over the /v1 API, with the user's key.
// Everything the API returns (hit text, file names, answers) is untrusted: it reaches the page only as
// text nodes (textContent, createTextNode), never as HTML.
"use strict";

const KEY_STORAGE = "ragserve.apiKey";
const API_ROOT = new URL("../", document.baseURI); // the page lives at <root>/ui/
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const POLL_MS = 500;
// Words too common to be worth a highlight (they are not query terms for BM25 either).
const STOPWORDS = new Set(("a an and are as at be by do does for from has have how i in is it its of on or " +
  "that the this to was were what when where which who why will with you your").split(" "));

const $ = (id) => document.getElementById(id);

// ---- small DOM helpers -------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function status(text) { $("status").textContent = text; }

function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = err instanceof ApiError ? `${err.status} ${err.code}: ${err.message}` : String(err.message || err);
  box.hidden = false;
}

// ---- the API -----------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }

  static async from(response) {
    let body = null;
    try { body = await response.json(); } catch { /* not JSON */ }
    const e = (body && body.error) || {};
    return new ApiError(response.status, e.code || "error", e.message || response.statusText);
  }
}

function apiKey() { return sessionStorage.getItem(KEY_STORAGE) || ""; }

async function api(path, { method = "GET", json, form, signal, raw = false } = {}) {
  const key = apiKey();
  if (!key) { $("api-key").focus(); throw new Error("paste an API key first"); }
  const headers = { Authorization: `Bearer ${key}` };
  let body;
  if (json !== undefined) { headers["Content-Type"] = "application/json"; body = JSON.stringify(json); }
  else if (form) body = form;
  const response = await fetch(new URL(path, API_ROOT), { method, headers, body, signal });
  if (!response.ok) throw await ApiError.from(response);
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}

// ---- formatting --------------------------------------------------------------------------------------
const fmtScore = (x) => (typeof x === "number" ? x.toFixed(4) : "—");
const fmtMs = (x) => `${x.toFixed(1)} ms`;
const range = (a, b) => (a === b ? `${a}` : `${a}–${b}`);

/** The parts of a location a person reads, in order, as [key, label, value]. */
function locationParts(loc) {
  if (!loc) return [];
  const out = [];
  if (loc.char_start !== undefined && loc.char_end !== undefined) out.push(["chars", "Characters", range(loc.char_start, loc.char_end)]);
  if (loc.byte_start !== undefined && loc.byte_end !== undefined) out.push(["bytes", "Bytes", range(loc.byte_start, loc.byte_end)]);
  if (loc.page !== undefined && loc.page !== null) out.push(["page", "Page", String(loc.page)]);
  if (loc.headings && loc.headings.length) out.push(["headings", "Headings", loc.headings.join(" › ")]);
  if (loc.slide !== undefined && loc.slide !== null) out.push(["slide", "Slide", String(loc.slide)]);
  if (loc.sheet !== undefined && loc.sheet !== null) out.push(["sheet", "Sheet", String(loc.sheet)]);
  if (Array.isArray(loc.rows) && loc.rows.length === 2) out.push(["rows", "Rows", range(loc.rows[0], loc.rows[1])]);
  if (loc.picture !== undefined && loc.picture !== null) out.push(["picture", "Picture", String(loc.picture)]);
  if (loc.source === "ocr") out.push(["source", "Read by", "OCR"]);
  if (loc.source === "vision") out.push(["source", "Read by", "Description of the picture (VL model)"]);
  return out;
}

function fillLocation(dl, loc) {
  dl.replaceChildren();
  const parts = locationParts(loc);
  if (!parts.length) { dl.append(el("dt", {}, "Location"), el("dd", { dataset: { key: "none" } }, "not recorded")); return; }
  for (const [key, label, value] of parts) dl.append(el("dt", {}, label), el("dd", { dataset: { key } }, value));
}

/** The query's words worth a highlight: lower-cased, without stopwords or single letters, each once. */
function queryTerms(query) {
  const terms = new Set();
  for (const [word] of (query || "").toLowerCase().matchAll(/[\p{L}\p{N}]+/gu)) {
    if (word.length > 1 && !STOPWORDS.has(word)) terms.add(word);
  }
  return [...terms];
}

/** ``text`` as text nodes, with every whole-word occurrence of a term inside <mark>. */
function highlighted(text, terms) {
  const frag = document.createDocumentFragment();
  if (!terms.length) { frag.append(text); return frag; }
  const escaped = terms.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).sort((a, b) => b.length - a.length);
  const re = new RegExp(`(?<![\\p{L}\\p{N}])(?:${escaped.join("|")})(?![\\p{L}\\p{N}])`, "giu");
  let last = 0;
  for (const m of text.matchAll(re)) {
    frag.append(text.slice(last, m.index), el("mark", {}, m[0]));
    last = m.index + m[0].length;
  }
  frag.append(text.slice(last));
  return frag;
}

// ---- key and collections ----------------------------------------------------------------------------
let collections = [];

async function loadCollections() {
  const select = $("collection");
  const previous = select.value;
  try {
    collections = (await api("v1/collections")).collections;
  } catch (err) { showError(err); return; }
  showError(null);
  select.replaceChildren(...collections.map((c) => el("option", { value: c.name }, `${c.name} (${c.points} chunks)`)));
  if (!collections.length) select.append(el("option", { value: "" }, "(none yet: create one under Jobs)"));
  if (collections.some((c) => c.name === previous)) select.value = previous;
  renderChatCollections();
  $("upload-target").textContent = $("quality-target").textContent = select.value || "the selected collection";
  status(`${collections.length} collection${collections.length === 1 ? "" : "s"}`);
  showIndex();
}

// The embedded store's index of the selected collection (GET /v1/collections/{name} has it; a listing does
// not): read again every 2 s while a background build runs.
function indexText(index) {
  const parts = [`${index.indexed} indexed`, `${index.unindexed} searched exactly`];
  if (index.build === "running") {
    const pct = index.progress == null ? "" : ` ${Math.round(index.progress * 100)}%`;
    const eta = index.eta_s == null ? "" : `, about ${index.eta_s < 90 ? `${Math.round(index.eta_s)} s`
      : `${Math.round(index.eta_s / 60)} min`} left`;
    parts.push(`building: ${index.phase}${pct}${eta}`);
    if (index.waiting_writes) parts.push(`${index.waiting_writes} write(s) waiting for it`);
  } else if (index.build === "failed") {
    parts.push(`last build given up: ${index.reason}`);
  } else if (index.build === "off") {
    parts.push("background builds off");
  }
  if (index.last_ended) parts.push(`last built ${index.last_built} at ${index.last_ended}`);
  return parts.join(" · ");
}

let indexTimer = null;
async function showIndex() {
  clearTimeout(indexTimer);
  const name = $("collection").value;
  const box = $("collection-index");
  let index = null;
  if (name) {
    try { index = (await api(`v1/collections/${encodeURIComponent(name)}`)).index; } catch (err) { index = null; }
  }
  if ($("collection").value !== name) return;  // another was picked meanwhile
  box.textContent = index ? indexText(index) : "";
  box.dataset.build = index ? index.build : "";
  if (index && index.build === "running") indexTimer = setTimeout(showIndex, 2000);
}

function setupKey() {
  $("api-key").value = apiKey();
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
    loadCollections().then(refreshJobs);
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    $("api-key").value = "";
    status("key forgotten");
  });
  $("refresh-collections").addEventListener("click", loadCollections);
  $("collection").addEventListener("change", () => {
    $("upload-target").textContent = $("quality-target").textContent = $("collection").value || "the selected collection";
    showIndex();
    if ($("quality-only").checked && !$("panel-quality").hidden) loadQuality();
  });
}

// ---- tabs (WAI-ARIA tabs: arrow keys, Home, End) -----------------------------------------------------
function setupTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab, focus = true) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute("aria-controls")).hidden = !on;
    }
    if (focus) tab.focus();
    if (tab.id === "tab-jobs" && apiKey()) refreshJobs();
    if (tab.id === "tab-quality" && apiKey()) loadQuality();
  };
  for (const tab of tabs) {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (e) => {
      const i = tabs.indexOf(tab);
      const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (next === undefined) return;
      e.preventDefault();
      select(tabs[(next + tabs.length) % tabs.length]);
    });
  }
}

// ---- search ------------------------------------------------------------------------------------------
let searchImage = null;

function setImage(file) {
  const preview = $("image-preview");
  if (preview.src) URL.revokeObjectURL(preview.src);
  searchImage = file || null;
  preview.hidden = $("image-clear").hidden = !searchImage;
  if (searchImage) preview.src = URL.createObjectURL(searchImage);
  else { preview.removeAttribute("src"); $("image").value = ""; }
}

function searchBody() {
  const body = { collection: $("collection").value, top_k: Number($("top-k").value) || 10 };
  const query = $("query").value.trim();
  if (query) body.query = query;
  if ($("mode").value) body.mode = $("mode").value;
  if ($("fusion").value) body.fusion = $("fusion").value;
  body.score_details = true; // a hybrid hit's dense and BM25 scores, shown beside the fused one
  // "default" leaves reranking to the deployment (on where its profile has a reranker).
  if ($("rerank").value || $("rerank-top-n").value) {
    body.rerank = { enabled: $("rerank").value !== "off" };
    if ($("rerank-top-n").value) body.rerank.top_n = Number($("rerank-top-n").value);
  }
  return body;
}

async function runSearch(e) {
  e.preventDefault();
  const body = searchBody();
  if (!body.collection) { showError(new Error("pick a collection first")); return; }
  if (!body.query && !searchImage) { showError(new Error("type a query or drop an image")); $("query").focus(); return; }
  const button = $("search-button");
  button.disabled = true;
  status("searching…");
  try {
    let result;
    if (searchImage) {
      const form = new FormData();
      form.append("request", JSON.stringify(body));
      form.append("image", searchImage, searchImage.name || "image");
      result = await api("v1/search/upload", { method: "POST", form });
    } else {
      result = await api("v1/search", { method: "POST", json: body });
    }
    showError(null);
    renderResult(result);
    status(`${result.hits.length} hits in ${fmtMs(result.timings_ms.total ?? 0)}`);
  } catch (err) {
    showError(err);
    status("");
  } finally {
    button.disabled = false;
  }
}

function renderResult(result) {
  $("search-result").hidden = false;
  const summary = [`${result.hits.length} hits`, result.mode, result.reranked ? "reranked" : "not reranked"];
  $("search-summary").replaceChildren(
    summary.join(" · "),
    result.generated_query ? el("span", { class: "generated" }, " · query written from the image: ",
      el("q", { id: "generated-query" }, result.generated_query)) : "",
  );
  const timings = $("timings");
  timings.replaceChildren();
  for (const [stage, ms] of Object.entries(result.timings_ms)) {
    timings.append(el("div", { dataset: { stage } }, el("dt", {}, stage), el("dd", {}, fmtMs(ms))));
  }
  const terms = queryTerms(result.query);
  $("hits").replaceChildren(...result.hits.map((hit) => renderHit(hit, terms, result.mode, result.search_id)));
}

// What the engine's score is in each mode, named as a person reads it; the title says what it measures.
const VECTOR_LABEL = {
  dense: ["dense", "cosine similarity of the query's and the chunk's embeddings"],
  sparse: ["BM25", "BM25 keyword score of the chunk for the query's terms"],
  hybrid: ["fused", "the dense and BM25 rankings fused into one score (RRF or DBSF)"],
};

/** One score as <div data-score><dt>label</dt><dd>value</dd></div>; ``title`` explains it on hover. */
function scoreItem(key, label, value, title) {
  return el("div", { dataset: { score: key }, title }, el("dt", {}, label), el("dd", {}, fmtScore(value)));
}

/** The hit's scores: the one it is ordered by, the engine's (labelled by mode) and, for a hybrid hit, the dense
 * and BM25 scores it was fused from (a BM25 score of "—": the chunk shares no term with the query). */
function scoreList(hit, mode) {
  const [label, title] = VECTOR_LABEL[mode] || ["vector", "the vector store's score"];
  const items = [scoreItem("score", "score", hit.score, "the score the hits are ordered by"),
    scoreItem("vector_score", label, hit.vector_score, title)];
  if (mode === "hybrid") {
    items.push(scoreItem("dense_score", VECTOR_LABEL.dense[0], hit.dense_score, VECTOR_LABEL.dense[1]),
      scoreItem("bm25_score", VECTOR_LABEL.sparse[0], hit.bm25_score,
        hit.bm25_score === null || hit.bm25_score === undefined
          ? "no BM25 score: the chunk shares no term with the query" : VECTOR_LABEL.sparse[1]));
  }
  items.push(scoreItem("rerank_score", "rerank", hit.rerank_score, "the reranker's relevance, when reranked"));
  return el("dl", { class: "scores" }, ...items);
}

function renderHit(hit, terms, mode, searchId) {
  const loc = el("dl", { class: "location" });
  fillLocation(loc, hit.location);
  const scores = scoreList(hit, mode);
  const meta = Object.keys(hit.metadata || {}).length
    ? el("details", {}, el("summary", {}, "metadata"), el("pre", {}, JSON.stringify(hit.metadata, null, 2)))
    : "";
  return el("li", { class: "hit", dataset: { docId: hit.doc_id, chunk: String(hit.chunk_index) } },
    el("header", {},
      el("span", { class: "rank" }, `#${hit.rank}`),
      el("span", { class: "doc-id" }, hit.doc_id),
      el("span", { class: "chunk" }, `chunk ${hit.chunk_index}`),
      scores,
      searchId ? thumbs(searchId, hit.id) : ""),
    el("p", { class: "text" }, highlighted(hit.text, terms)),
    loc, meta);
}

// ---- feedback on a hit -------------------------------------------------------------------------------
// [rating, what it means]: POST /v1/feedback takes -1 (wrong) to 3; the thumbs send the two ends a person means.
const THUMBS = [[1, "Relevant"], [-1, "Wrong"]];
const SVG_NS = "http://www.w3.org/2000/svg";

/** A thumb drawn as an SVG path (no emoji font, no image file needed); down is up mirrored top to bottom. */
function thumbIcon(down) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  const path = document.createElementNS(SVG_NS, "path");
  path.setAttribute("d", "M2.5 10h3.5v11h-3.5z M8 10l4-7c1.6 0 2.6 1.2 2.3 2.8L13.6 10h5.9c1.4 0 2.4 1.3 2 2.7"
    + "l-1.9 6.6c-.3 1-1.1 1.7-2.1 1.7H8z");
  if (down) path.setAttribute("transform", "matrix(1 0 0 -1 0 24)");
  svg.append(path);
  return svg;
}

/** Thumbs up and down for one hit of the search ``searchId``; the hit is named by its chunk's id. */
function thumbs(searchId, chunkId) {
  const note = el("span", { class: "feedback-note", "aria-live": "polite" });
  const box = el("div", { class: "feedback", role: "group", "aria-label": "Rate this hit" });
  const buttons = THUMBS.map(([rating, label]) => el("button", {
    type: "button", class: "thumb", dataset: { rating: String(rating) }, "aria-pressed": "false", title: label,
    "aria-label": `${label} (rating ${rating})`, onclick: () => rate(box, searchId, chunkId, rating),
  }, thumbIcon(rating < 0)));
  box.append(...buttons, note);
  return box;
}

/** Send the rating; a second one on the same hit replaces the first on the server, so the page shows the last. */
async function rate(box, searchId, chunkId, rating) {
  const buttons = [...box.querySelectorAll("button.thumb")];
  const note = box.querySelector(".feedback-note");
  for (const b of buttons) b.disabled = true; // one rating in flight per hit: the last one sent is the one kept
  try {
    const result = await api("v1/feedback", { method: "POST", json: { search_id: searchId, chunk_id: chunkId, rating } });
    showError(null);
    for (const b of buttons) b.setAttribute("aria-pressed", String(Number(b.dataset.rating) === result.rating));
    note.textContent = result.stored ? "saved" : "not stored: query log off";
    note.dataset.stored = String(result.stored);
    box.dataset.rated = String(result.rating);
  } catch (err) {
    showError(err);
  } finally {
    for (const b of buttons) b.disabled = false;
  }
}

function setupSearch() {
  $("search-form").addEventListener("submit", runSearch);
  $("image").addEventListener("change", () => setImage($("image").files[0]));
  $("image-clear").addEventListener("click", () => setImage(null));
  dropZone($("image-drop"), async (files) => {
    const image = files.find((f) => f.type.startsWith("image/"));
    if (image) setImage(image); else showError(new Error("drop an image file (PNG, JPEG, WebP or GIF)"));
  });
}

// ---- context -----------------------------------------------------------------------------------------
const REASONS = { duplicate: "repeats passage", merged: "merged into passage", budget: "did not fit the budget" };

async function buildContext(e) {
  e.preventDefault();
  const body = { collection: $("collection").value, query: $("context-query").value.trim(),
    budget_tokens: Number($("context-budget").value) || 1000, order: $("context-order").value };
  if ($("context-neighbours").value !== "") body.neighbours = Number($("context-neighbours").value);
  if (!body.collection) { showError(new Error("pick a collection first")); return; }
  if (!body.query) { showError(new Error("type a question")); $("context-query").focus(); return; }
  const button = $("context-button");
  button.disabled = true;
  status("building the context…");
  try {
    const result = await api("v1/context", { method: "POST", json: body });
    showError(null);
    renderContext(result, body.budget_tokens);
    status(`${result.passages.length} passages, ${result.tokens} of ${body.budget_tokens} tokens`);
  } catch (err) {
    showError(err);
    status("");
  } finally {
    button.disabled = false;
  }
}

function renderContext(result, budget) {
  $("context-result").hidden = false;
  $("context-summary").replaceChildren(el("span", { id: "context-tokens" }, `${result.tokens} / ${budget} tokens`),
    ` (${result.tokenizer}) · ${result.passages.length} passages · query: `, el("q", {}, result.query_used));
  $("context-text").textContent = result.context;
  $("context-dropped").replaceChildren(...result.dropped.map((d) => el("li",
    { dataset: { reason: d.reason, docId: d.doc_id, chunk: String(d.chunk_index) } },
    el("span", { class: "doc-id" }, `${d.doc_id} #${d.chunk_index}`), " ",
    el("span", { class: "reason" }, d.reason), " ",
    `${REASONS[d.reason] || ""}${d.passage ? ` [${d.passage}]` : ""}`)));
}

function setupContext() {
  $("context-form").addEventListener("submit", buildContext);
}

// ---- quality -----------------------------------------------------------------------------------------
// What each kind's top score is (GET /v1/quality buckets the reranker's when a search was reranked).
const KIND_LABEL = { dense: "dense (cosine)", sparse: "sparse (BM25)", hybrid: "hybrid (fused score)",
  rerank: "reranked (the reranker's score)" };
let qualityAsked = 0; // the latest request: an older answer arriving later is not drawn over it

function qualityPath() {
  const params = new URLSearchParams({ hours: $("quality-hours").value });
  if ($("quality-only").checked && $("collection").value) params.set("collection", $("collection").value);
  return `v1/quality?${params}`;
}

async function loadQuality(e) {
  if (e) e.preventDefault();
  const asked = ++qualityAsked;
  const collection = $("quality-only").checked ? $("collection").value : "";
  const hours = $("quality-hours").selectedOptions[0].textContent;
  $("quality-refresh").disabled = true;
  try {
    const summary = await api(qualityPath());
    if (asked !== qualityAsked) return;
    showError(null);
    renderQuality(summary, collection, hours);
  } catch (err) {
    if (asked === qualityAsked) showError(err);
  } finally {
    if (asked === qualityAsked) $("quality-refresh").disabled = false;
  }
}

function renderQuality(summary, collection, hours) {
  $("quality-result").hidden = false;
  $("quality-scope").textContent = `${collection || "every collection this key may see"} · the last ${hours}`;
  $("quality-searches").textContent = String(summary.searches);
  $("quality-zero-rate").textContent = summary.zero_hit_rate === null ? "—"
    : `${(summary.zero_hit_rate * 100).toFixed(1)}% (${summary.zero_hits} of ${summary.searches})`;
  const kinds = Object.entries(summary.top_score);
  $("quality-histograms").replaceChildren(...(kinds.length ? kinds.map(([kind, buckets]) => histogram(kind, buckets))
    : [el("p", { class: "empty" }, "no search with hits in this window")]));
}

/** One kind's buckets as horizontal bars, the fullest as wide as the track; the empty buckets below the lowest
 * and above the highest score are left out (a cosine histogram alone has 22). */
function histogram(kind, buckets) {
  const counts = buckets.map((b) => b.count);
  const first = counts.findIndex((n) => n > 0);
  const last = counts.findLastIndex((n) => n > 0);
  const most = Math.max(...counts);
  const total = counts.reduce((a, b) => a + b, 0);
  const rows = buckets.slice(first, last + 1).map((b, i) => {
    const below = first + i > 0 ? buckets[first + i - 1].le : null;
    const label = b.le === null ? `> ${below}` : below === null ? `≤ ${b.le}` : `${below}–${b.le}`;
    const bar = el("span", { class: "fill" });
    bar.style.width = `${(100 * b.count) / most}%`; // CSSOM, not a style attribute: the CSP allows it
    return el("li", { dataset: { le: b.le === null ? "" : String(b.le), count: String(b.count) } },
      el("span", { class: "bucket" }, label), el("span", { class: "track", "aria-hidden": "true" }, bar),
      el("span", { class: "count" }, String(b.count)));
  });
  return el("section", { class: "histogram", dataset: { kind } },
    el("h3", {}, KIND_LABEL[kind] || kind, el("span", { class: "n" }, ` · ${total} search${total === 1 ? "" : "es"}`)),
    el("ol", { "aria-label": `top ${kind} score: searches per score range` }, rows));
}

function setupQuality() {
  $("quality-form").addEventListener("submit", loadQuality);
  $("quality-hours").addEventListener("change", () => loadQuality());
  $("quality-only").addEventListener("change", () => loadQuality());
}

// ---- drag and drop -----------------------------------------------------------------------------------
/** Call ``onFiles([File])`` for what is dropped on ``zone``; folders are walked (paths kept in .relPath). */
function dropZone(zone, onFiles) {
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", async (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    const entries = [...(e.dataTransfer.items || [])].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    const files = entries.length ? (await Promise.all(entries.map(walkEntry))).flat() : [...e.dataTransfer.files];
    if (files.length) onFiles(files);
  });
}

async function walkEntry(entry) {
  if (entry.isFile) {
    const file = await new Promise((ok, fail) => entry.file(ok, fail));
    file.relPath = entry.fullPath.replace(/^\/+/, "");
    return [file];
  }
  const reader = entry.createReader();
  const children = [];
  for (;;) { // readEntries answers in batches until an empty one
    const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
    if (!batch.length) break;
    children.push(...batch);
  }
  return (await Promise.all(children.map(walkEntry))).flat();
}

// ---- jobs --------------------------------------------------------------------------------------------
const polling = new Map(); // job id -> timer

async function upload(files) {
  const name = $("collection").value;
  if (!name) { showError(new Error("create or pick a collection first")); $("new-collection").focus(); return; }
  const form = new FormData();
  for (const f of files) form.append("files", f, f.relPath || f.webkitRelativePath || f.name);
  status(`uploading ${files.length} file${files.length === 1 ? "" : "s"} to ${name}…`);
  try {
    const job = await api(`v1/collections/${encodeURIComponent(name)}/ingest`, { method: "POST", form });
    job.files = files.map((f) => f.relPath || f.webkitRelativePath || f.name);
    showError(null);
    status(`job ${job.id} submitted`);
    renderJob(job);
    follow(job.id);
  } catch (err) { showError(err); status(""); }
}

function follow(id) {
  if (polling.has(id)) return;
  const tick = async () => {
    try {
      const job = await api(`v1/jobs/${id}`);
      renderJob(job);
      if (TERMINAL.has(job.state)) {
        polling.delete(id);
        status(`job ${job.id} ${job.state}`);
        if (job.state === "succeeded") loadCollections();
        return;
      }
    } catch (err) { showError(err); polling.delete(id); return; }
    polling.set(id, setTimeout(tick, POLL_MS));
  };
  polling.set(id, setTimeout(tick, 0));
}

async function refreshJobs() {
  try {
    const { jobs } = await api("v1/jobs?limit=20");
    for (const job of jobs.reverse()) { renderJob(job); if (!TERMINAL.has(job.state)) follow(job.id); }
  } catch (err) { showError(err); }
}

const COUNTS = [["documents_seen", "seen"], ["documents_total", "total"], ["documents_indexed", "indexed"],
  ["documents_unchanged", "unchanged"], ["documents_failed", "failed"], ["documents_deleted", "deleted"],
  ["files_failed", "files failed"], ["chunks", "chunks"], ["tokens", "tokens"],
  ["chunks_truncated", "cut to the window"]];

function renderJob(job) {
  const list = $("jobs");
  let item = list.querySelector(`li[data-job-id="${CSS.escape(job.id)}"]`);
  if (!item) {
    item = el("li", { class: "job", dataset: { jobId: job.id } });
    list.prepend(item);
  }
  if (job.files) item.dataset.files = JSON.stringify(job.files);
  const files = item.dataset.files ? JSON.parse(item.dataset.files) : [];
  const fraction = job.progress.fraction;
  const bar = el("progress", { max: "1", "aria-label": `progress of job ${job.id}` });
  if (fraction !== null && fraction !== undefined) bar.value = fraction;
  const p = job.progress;
  const rate = [p.tokens_per_s ? `${p.tokens_per_s >= 10 ? Math.round(p.tokens_per_s) : p.tokens_per_s.toFixed(1)} tokens/s` : "",
    p.eta_s ? `ETA ${Math.ceil(p.eta_s)} s` : "", p.elapsed_s ? `${p.elapsed_s.toFixed(1)} s elapsed` : ""].filter(Boolean);
  const counts = el("dl", { class: "counts" }, COUNTS.filter(([k]) => job.counts[k] !== null && job.counts[k] !== undefined)
    .map(([k, label]) => el("div", { dataset: { count: k } }, el("dt", {}, label), el("dd", {}, String(job.counts[k])))));
  const cancel = TERMINAL.has(job.state) ? "" : el("button", {
    type: "button", class: "quiet", onclick: () => api(`v1/jobs/${job.id}`, { method: "DELETE" }).catch(showError),
  }, "Cancel");
  item.replaceChildren(
    el("header", {},
      el("span", { class: "state", dataset: { state: job.state } }, job.state),
      el("span", { class: "job-collection" }, job.collection),
      el("span", { class: "job-files" }, files.length ? files.slice(0, 3).join(", ") + (files.length > 3 ? ` +${files.length - 3}` : "") : job.id),
      cancel),
    el("div", { class: "progress" }, bar, el("span", { class: "percent" }, fraction == null ? "…" : `${Math.round(fraction * 100)}%`),
      el("span", { class: "rate" }, rate.join(" · "))),
    counts,
    job.message ? el("p", { class: "message" }, job.message) : "",
    job.errors.length ? el("ul", { class: "errors" }, job.errors.slice(0, 20).map((e) =>
      el("li", {}, `${e.item || ""}: ${e.error || JSON.stringify(e)}`))) : "",
  );
}

function setupJobs() {
  $("create-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = $("new-collection").value.trim();
    try {
      await api("v1/collections", { method: "POST", json: { name } });
      showError(null);
      $("new-collection").value = "";
      await loadCollections();
      $("collection").value = name;
      $("collection").dispatchEvent(new Event("change"));
      renderChatCollections();
      status(`collection ${name} created`);
    } catch (err) { showError(err); }
  });
  for (const id of ["files", "folder"]) {
    $(id).addEventListener("change", () => { const files = [...$(id).files]; $(id).value = ""; if (files.length) upload(files); });
  }
  dropZone($("drop-files"), upload);
}

// ---- chat --------------------------------------------------------------------------------------------
let history = [];
let streaming = null; // the AbortController of the answer being streamed

function renderChatCollections() {
  const box = $("chat-collections");
  const checked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
  if (!checked.size && $("collection").value) checked.add($("collection").value);
  box.replaceChildren(el("legend", {}, "Ground answers in"), ...collections.map((c) =>
    el("label", { class: "check" }, el("input", { type: "checkbox", value: c.name, checked: checked.has(c.name) }), ` ${c.name}`)));
}

/** The answer's text with each [n] that names a known citation as a button that shows it. */
function renderAnswer(node, text, citations) {
  const byNumber = new Map((citations || []).map((c) => [c.number, c]));
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(/\[(\d{1,3})\]/g)) {
    const c = byNumber.get(Number(m[1]));
    if (!c) continue;
    frag.append(text.slice(last, m.index), citeButton(c));
    last = m.index + m[0].length;
  }
  frag.append(text.slice(last));
  node.replaceChildren(frag);
}

function citeButton(c) {
  return el("button", { type: "button", class: "cite", dataset: { number: String(c.number) },
    "aria-label": `show source ${c.number}, ${c.doc_id}`, onclick: (e) => showCitation(c, e.currentTarget) }, `[${c.number}]`);
}

let citationOpener = null;

function showCitation(c, opener) {
  citationOpener = opener;
  const view = $("citation-view");
  $("citation-title").textContent = `[${c.number}] ${c.doc_id} · ${c.collection}`;
  fillLocation($("citation-location"), { ...(c.offsets || {}), page: c.page, headings: c.headings, slide: c.slide, sheet: c.sheet, rows: c.rows, picture: c.picture, source: c.source });
  $("citation-location").append(el("dt", {}, "Chunk"), el("dd", { dataset: { key: "chunk" } }, String(c.chunk_index)),
    el("dt", {}, "Rerank score"), el("dd", { dataset: { key: "rerank" } }, fmtScore(c.rerank_score)),
    el("dt", {}, "Cited in the answer"), el("dd", { dataset: { key: "cited" } }, c.cited ? "yes" : "no"));
  $("citation-text").textContent = c.text;
  view.hidden = false;
  view.focus();
}

function closeCitation() {
  $("citation-view").hidden = true;
  if (citationOpener && citationOpener.isConnected) citationOpener.focus();
}

/** Yield each server-sent event's data (``data:`` lines joined) from a fetch response body. */
async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    const batch = [];
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
      if (data.length) batch.push(data.join("\n"));
    }
    if (batch.length) yield batch; // one batch per network read: the page is redrawn once per read
  }
}

async function sendChat(e) {
  e.preventDefault();
  if (streaming) return;
  const text = $("chat-input").value.trim();
  const grounded = [...$("chat-collections").querySelectorAll("input:checked")].map((i) => i.value);
  if (!text) { $("chat-input").focus(); return; }
  if (!grounded.length) { showError(new Error("tick at least one collection to ground the answer in")); return; }
  const messages = [...history, { role: "user", content: text }];
  const conversation = $("conversation");
  conversation.append(el("article", { class: "turn user" }, el("h3", { class: "sr-only" }, "You"), el("p", {}, text)));
  const answer = el("div", { class: "answer", "aria-busy": "true", "aria-live": "off" });
  const sources = el("ol", { class: "sources", "aria-label": "Sources" });
  const turn = el("article", { class: "turn assistant streaming" }, el("h3", { class: "sr-only" }, "Answer"), answer, sources);
  conversation.append(turn);
  $("chat-input").value = "";
  streaming = new AbortController();
  $("chat-send").disabled = true;
  $("chat-stop").disabled = false;
  status("answering…");
  let content = "";
  let citations = null;
  let done = false;
  try {
    const response = await api("v1/chat/completions", {
      method: "POST", raw: true, signal: streaming.signal, json: {
        messages, stream: true, max_tokens: Number($("chat-max-tokens").value) || undefined,
        ragserve: { collections: grounded, top_k: Number($("chat-top-k").value) || undefined, rerank: { on: true, off: false }[$("chat-rerank").value] },
      },
    });
    showError(null);
    for await (const batch of sseData(response.body)) {
      for (const data of batch) {
        if (data === "[DONE]") { done = true; break; }
        const event = JSON.parse(data);
        if (event.error) throw new ApiError(0, event.error.code, event.error.message);
        for (const choice of event.choices || []) content += (choice.delta && choice.delta.content) || "";
        if (event.ragserve) citations = event.ragserve.citations;
      }
      renderAnswer(answer, content, citations);
      if (done) break;
    }
    status(done ? "answered" : "the stream ended early");
  } catch (err) {
    if (err.name === "AbortError") status("stopped"); else { showError(err); status(""); }
  } finally {
    renderAnswer(answer, content, citations);
    if (citations) sources.replaceChildren(...citations.map((c) => el("li", { class: c.cited ? "cited" : "" },
      citeButton(c), " ", el("span", { class: "doc-id" }, c.doc_id), locationParts(
        { ...(c.offsets || {}), page: c.page, headings: c.headings, slide: c.slide, sheet: c.sheet, rows: c.rows })
        .filter(([k]) => k !== "bytes").map(([, label, value]) => el("span", { class: "where" }, ` · ${label.toLowerCase()} ${value}`)))));
    answer.setAttribute("aria-busy", "false");
    answer.setAttribute("aria-live", "polite");
    turn.classList.remove("streaming");
    turn.dataset.done = done ? "true" : "false";
    if (content) history = [...messages, { role: "assistant", content }];
    streaming = null;
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  }
}

function setupChat() {
  $("chat-form").addEventListener("submit", sendChat);
  $("chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("chat-form").requestSubmit();
  });
  $("chat-stop").addEventListener("click", () => streaming && streaming.abort());
  $("chat-clear").addEventListener("click", () => { history = []; $("conversation").replaceChildren(); closeCitation(); });
  $("citation-close").addEventListener("click", closeCitation);
  $("citation-view").addEventListener("keydown", (e) => { if (e.key === "Escape") closeCitation(); });
}

// ---- start -------------------------------------------------------------------------------------------
setupKey();
setupTabs();
setupSearch();
setupContext();
setupJobs();
setupChat();
setupQuality();
if (apiKey()) loadCollections(); else status("paste an API key to start");

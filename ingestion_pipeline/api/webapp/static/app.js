// The web app's script: what a page does after it loads, through the same /v1 routes every client uses. The
// session cookie signs each request in; a request that changes something carries the page's CSRF token.
"use strict";

const CSRF = document.body.dataset.csrf || "";
const ADMIN = document.body.dataset.admin === "1";

async function api(method, url, body) {
  const headers = {"Accept": "application/json"};
  if (method !== "GET") headers["X-CSRF-Token"] = CSRF;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {method, headers, credentials: "same-origin",
                                     body: body === undefined ? undefined : JSON.stringify(body)});
  if (response.status === 401) { window.location = "/app/sign-in?next=" + encodeURIComponent(location.pathname + location.search); }
  const data = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  return {status: response.status, data};
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function errorMessage(result) {
  return result.data?.error?.message || `failed (HTTP ${result.status})`;
}

// -- documents ---------------------------------------------------------------------------------------------------

function documentsPage() {
  for (const button of document.querySelectorAll("button.deactivate")) {
    button.addEventListener("click", async () => {
      button.disabled = true;
      const result = await api("POST", `/v1/documents/${button.dataset.docId}/deactivate`);
      const row = button.closest("tr");
      if (result.status === 200) {
        row.querySelector(".status").replaceChildren(el("span", {class: "badge", text: "deactivated"}));
        button.remove();
      } else {
        button.disabled = false;
        row.querySelector(".status").append(el("span", {class: "error", text: " " + errorMessage(result)}));
      }
    });
  }
}

// -- upload ------------------------------------------------------------------------------------------------------

function send(method, url, headers, body, onProgress) {
  return new Promise((resolve) => {
    const request = new XMLHttpRequest();
    request.open(method, url);
    for (const [key, value] of Object.entries(headers)) request.setRequestHeader(key, value);
    request.upload.onprogress = (event) => { if (event.lengthComputable) onProgress(event.loaded / event.total); };
    request.onload = () => {
      let data = null;
      try { data = JSON.parse(request.responseText); } catch (_) { /* not JSON: an S3 PUT's answer */ }
      resolve({status: request.status, data});
    };
    request.onerror = () => resolve({status: 0, data: {error: {message: "the connection failed"}}});
    request.send(body);
  });
}

function keyOf(name) {
  // a document key is letters, digits and . _ / - (the API's pattern), starting with a letter or digit
  const key = name.replace(/[^A-Za-z0-9._/-]+/g, "-").replace(/\.\.+/g, ".").replace(/^[^A-Za-z0-9]+/, "");
  return key.slice(0, 200) || null;
}

const UPLOADS_AT_ONCE = 2;
const BUSY_RETRIES = 5;

async function uploadOne(file, item) {
  const bar = item.querySelector("progress");
  const state = item.querySelector(".state");
  const progress = (fraction) => { bar.value = fraction; };
  // a presigned S3 PUT when the deployment has an upload bucket; otherwise the bytes streamed to the API
  // a file named as one uploaded before is its new version (the name as the document's key), unless unticked
  const key = document.getElementById("as-version").checked ? keyOf(file.name) : null;
  let result = await api("POST", "/v1/uploads", {filename: file.name, size_bytes: file.size, ...(key ? {key} : {}),
                                                 content_type: file.type || "application/octet-stream"});
  if (result.status === 201) {
    const put = await send(result.data.method, result.data.url, result.data.headers || {}, file, progress);
    if (put.status < 200 || put.status >= 300) {
      state.textContent = `failed: the upload to storage answered ${put.status}`;
      item.dataset.result = "failed";
      return;
    }
    result = await api("POST", `/v1/uploads/${result.data.upload_id}/complete`);
  } else {
    const form = new FormData();
    if (key) form.append("key", key);
    form.append("file", file, file.name);
    for (let attempt = 0; ; attempt++) {
      result = await send("POST", "/v1/ingest", {"X-CSRF-Token": CSRF, "Accept": "application/json"}, form, progress);
      // busy (another tab's uploads, or the server's): wait as told, then again
      if (result.status !== 429 && result.status !== 503 || attempt >= BUSY_RETRIES) break;
      state.textContent = "the server is busy: waiting";
      await new Promise((resolve) => setTimeout(resolve, 2000 * (attempt + 1)));
    }
  }
  bar.value = 1;
  if (result.status === 202) {
    item.dataset.result = "queued";
    state.replaceChildren("queued · ", el("a", {href: "/app/files", text: "follow it"}));
  } else if (result.status === 200) {
    item.dataset.result = "duplicate";
    state.replaceChildren("already in the knowledge base · ",
                          el("a", {href: `/app/documents/${result.data.doc_id}`, text: "open it"}));
  } else {
    item.dataset.result = "failed";
    state.textContent = "failed: " + errorMessage(result);
  }
}

function uploadPage() {
  const input = document.getElementById("files");
  const drop = document.getElementById("drop");
  const list = document.getElementById("uploads");
  // a user streams at most UPLOADS_AT_ONCE uploads at a time (the API's share per user): the rest wait their turn
  const waiting = [];
  let running = 0;
  const next = async () => {
    while (running < UPLOADS_AT_ONCE && waiting.length) {
      const [file, item] = waiting.shift();
      running += 1;
      item.querySelector(".state").textContent = "uploading";
      uploadOne(file, item).finally(() => { running -= 1; next(); });
    }
  };
  const start = (files) => {
    for (const file of files) {
      const item = el("li", {"data-name": file.name}, el("span", {class: "name", text: file.name}),
                      el("progress", {max: "1", value: "0"}), el("span", {class: "state", text: "waiting"}));
      list.append(item);
      waiting.push([file, item]);
    }
    next();
  };
  input.addEventListener("change", () => { start(input.files); input.value = ""; });
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    start(event.dataTransfer.files);
  });
}

// -- ingestion history, live -------------------------------------------------------------------------------------

const STEP_WORDS = {fetch: "fetching", extract: "extracting", "plan units": "planning units",
                    "assemble units": "assembling units", chunk: "chunking", "plan chunk parts": "chunking in parts",
                    "assemble chunks": "chunking in parts", embed: "embedding", promote: "promoting"};

function describe(file) {
  if (file.status === "failed" || file.status === "dead_letter") {
    return (file.error_code ? file.error_code + ": " : "") + (file.error || "");
  }
  const stats = file.stats || {};
  if (file.status === "succeeded") {
    return [stats.pages && `${stats.pages} pages`, stats.chunks && `${stats.chunks} chunks`].filter(Boolean).join(" · ");
  }
  if (file.status === "running") {
    const parts = [STEP_WORDS[stats.step] || stats.step || "starting"];
    if (stats.units_total && stats.step === "extract") parts.push(`units ${stats.units_done || 0} / ${stats.units_total}`);
    if (stats.elements) parts.push(`${stats.elements} elements`);
    if (stats.chunks) parts.push(`${stats.chunks} chunks`);
    return parts.join(" · ");
  }
  const next = file.next_attempt_at ? new Date(file.next_attempt_at) : null;
  return next && next > new Date() ? `next try ${next.toLocaleTimeString()}` : "waiting for a run";
}

function fileRow(file) {
  let row = document.querySelector(`tr[data-file-id="${file.file_id}"]`);
  if (!row) {
    row = el("tr", {"data-file-id": String(file.file_id)},
             el("td", {class: "name"}), el("td", {}, el("a", {href: `/app/documents/${file.doc_id}`, text: String(file.doc_id)})),
             el("td", {class: "status"}), el("td", {class: "progress"}), el("td", {class: "updated"}),
             el("td", {class: "actions"}));
    document.querySelector("#files tbody").prepend(row);
  }
  row.dataset.status = file.status;
  // the states this page saw the file in, in order (what a person watching saw)
  const seen = (row.dataset.seen || "").split(" ").filter(Boolean);
  if (seen[seen.length - 1] !== file.status) row.dataset.seen = [...seen, file.status].join(" ");
  row.querySelector(".name").textContent = (file.config || {}).filename || file.source_uri;
  row.querySelector(".status").replaceChildren(el("span", {class: `badge ${file.status}`, text: file.status}));
  row.querySelector(".progress").textContent = describe(file);
  row.querySelector(".updated").textContent = new Date(file.updated_at).toLocaleString();
  const actions = row.querySelector(".actions");
  actions.replaceChildren();
  if (ADMIN && ["failed", "dead_letter", "canceled"].includes(file.status)) {
    const retry = el("button", {class: "retry", text: "Retry"});
    retry.addEventListener("click", async () => {
      retry.disabled = true;
      const result = await api("POST", `/v1/files/${file.file_id}/retry`);
      if (result.status === 200) fileRow(result.data);
      else { retry.disabled = false; actions.append(el("span", {class: "error", text: " " + errorMessage(result)})); }
    });
    actions.append(retry);
  }
}

async function resyncFiles() {
  const result = await api("GET", "/v1/files?limit=50");
  if (result.status === 200) for (const file of result.data.items.reverse()) fileRow(file);
}

function filesPage() {
  resyncFiles();  // the rows as the script draws them (their actions included), then kept live
  const live = document.getElementById("live");
  const source = new EventSource("/v1/files/events");
  source.onopen = () => { live.textContent = "live"; live.classList.add("on"); };
  source.onerror = () => { live.textContent = "reconnecting…"; live.classList.remove("on"); };
  source.addEventListener("file", (event) => fileRow(JSON.parse(event.data)));
  source.addEventListener("resync", resyncFiles);
}

// -- search ------------------------------------------------------------------------------------------------------

function citationLink(hit) {
  const source = hit.source;
  const where = [source.title || source.filename || source.source_uri];
  if (source.page_start) where.push(source.page_end && source.page_end !== source.page_start
                                    ? `pages ${source.page_start}–${source.page_end}` : `page ${source.page_start}`);
  if (source.section_path?.length) where.push(source.section_path.join(" › "));
  const params = new URLSearchParams({version: source.version_number, chunk: hit.chunk_id});
  if (source.page_start) params.set("page", source.page_start);
  return el("a", {class: "citation", href: `/app/documents/${source.doc_id}?${params}`, text: where.join(" · ")});
}

async function searchPage() {
  const q = document.getElementById("q").value.trim();
  const status = document.getElementById("search-status");
  const hits = document.getElementById("hits");
  if (!q) return;
  status.textContent = "searching…";
  const params = new URLSearchParams({q, k: "10", context: "1"});
  const several = (id, name) => {
    for (const value of document.getElementById(id).value.split(",").map((v) => v.trim()).filter(Boolean)) {
      params.append(name, value);
    }
  };
  several("f-type", "type");
  several("f-language", "language");
  several("f-doc", "doc_id");
  const source = document.getElementById("f-source").value.trim();
  if (source) params.set("source", source);
  for (const [id, name] of [["f-since", "since"], ["f-until", "until"]]) {
    const day = document.getElementById(id).value;
    if (day) params.set(name, `${day}T00:00:00Z`);
  }
  const result = await api("GET", `/v1/search?${params}`);
  if (result.status !== 200) { status.textContent = errorMessage(result); return; }
  status.textContent = `${result.data.hits.length} passages`;
  hits.replaceChildren(...result.data.hits.map((hit) => {
    const also = (hit.also_in || []).map((other) => typeof other === "string" ? other
                                               : other.title || other.filename || other.source_uri).filter(Boolean);
    return el("li", {class: "hit", "data-chunk-id": String(hit.chunk_id)},
              citationLink(hit),
              el("blockquote", {text: hit.source.text}),
              ...(hit.context_after?.length ? [el("p", {class: "context", text: "… " + hit.context_after.map((c) => c.text || c).join(" ")})] : []),
              ...(also.length ? [el("p", {class: "note", text: "also in: " + also.join(", ")})] : []));
  }));
}

// -- inspector ---------------------------------------------------------------------------------------------------

async function inspectorPage() {
  const body = document.body.dataset;
  const version = body.version ? `?version=${body.version}` : "";
  const result = await api("GET", `/v1/documents/${body.docId}/chunks${version}`);
  if (result.status !== 200) { document.getElementById("doc-meta").textContent = errorMessage(result); return; }
  const doc = result.data;
  document.getElementById("doc-title").textContent = doc.title || doc.filename || doc.source_uri;
  const languages = new Map();
  for (const chunk of doc.chunks) languages.set(chunk.language, (languages.get(chunk.language) || 0) + 1);
  const language = [...languages.entries()].sort((a, b) => b[1] - a[1])[0]?.[0];
  document.getElementById("doc-meta").textContent =
    `version ${doc.version_number}${doc.is_active ? " (served)" : ""} · ${doc.filename || ""} · ` +
    `${doc.page_count ? doc.page_count + " pages · " : ""}${doc.chunk_count} chunks · ${doc.token_count} tokens` +
    (language ? ` · ${language}` : "") + ` · ${doc.source_uri}`;
  api("GET", `/v1/documents/${doc.doc_id}`).then((detail) => {  // the document's versions, each one a link
    if (detail.status !== 200 || detail.data.versions.length < 2) return;
    const versions = el("p", {class: "note", id: "versions"}, "versions: ");
    for (const version of detail.data.versions) {
      const label = `${version.version_number}${version.is_active ? " (served)" : ""}`;
      versions.append(version.version_number === doc.version_number ? el("strong", {text: label})
        : el("a", {href: `/app/documents/${doc.doc_id}?version=${version.version_number}`, text: label}), " ");
    }
    document.getElementById("doc-meta").after(versions);
  });
  const pages = document.getElementById("pages");
  const figures = new Map();
  const ocrPages = new Set(doc.ocr_pages || []);
  const toggleWords = async (figure, number, toggle) => {
    const shown = figure.querySelectorAll(".word");
    if (shown.length) { shown.forEach((word) => word.remove()); toggle.textContent = "show OCR words"; return; }
    toggle.disabled = true;  // one request at a time: a second click while it is asked would outline each word twice
    const layout = await api("GET", `/v1/documents/${doc.doc_id}/pages/${number}/layout?version=${doc.version_number}`);
    toggle.disabled = false;
    if (layout.status !== 200) { toggle.replaceWith(el("span", {class: "error", text: errorMessage(layout)})); return; }
    for (const run of layout.data.runs) {
      const [x0, y0, x1, y1] = run.box;
      const word = el("div", {class: "word", title: run.text});
      word.style.left = `${x0 * 100}%`; word.style.top = `${y0 * 100}%`;
      word.style.width = `${(x1 - x0) * 100}%`; word.style.height = `${(y1 - y0) * 100}%`;
      figure.append(word);
    }
    toggle.textContent = `hide OCR words (${layout.data.runs.length})`;
  };
  const showPage = (number) => {
    if (!doc.page_images || number > doc.page_images || figures.has(number)) return figures.get(number);
    const image = el("img", {src: `/v1/documents/${doc.doc_id}/pages/${number}/image?version=${doc.version_number}`,
                             alt: `page ${number}`, loading: "lazy"});
    image.addEventListener("error", () => image.replaceWith(el("p", {class: "note", text: `page ${number}: no image`})));
    const caption = el("figcaption", {text: `page ${number}`});
    const figure = el("figure", {class: "page", id: `page-${number}`, "data-page": String(number)}, image, caption);
    if (ocrPages.has(number)) {  // a scan: OCR's words, outlined on demand
      const toggle = el("button", {class: "words-toggle", type: "button", text: "show OCR words"});
      toggle.addEventListener("click", () => toggleWords(figure, number, toggle));
      caption.append(" · read by OCR ", toggle);
      figure.dataset.ocr = "true";
    }
    figures.set(number, figure);
    const after = [...pages.children].find((other) => Number(other.dataset.page) > number);
    pages.insertBefore(figure, after || null);
    return figure;
  };
  if (!doc.page_images) pages.append(el("p", {class: "note", text: "This document is read as text: select a chunk to see it."}));
  else if (doc.laid_out) pages.append(el("p", {class: "note", text: "Pages as LibreOffice lays the file out."}));
  const list = document.getElementById("chunks");
  const select = async (chunk, item) => {
    for (const other of list.querySelectorAll(".selected")) other.classList.remove("selected");
    item.classList.add("selected");
    for (const box of pages.querySelectorAll(".box")) box.remove();
    if (!doc.page_images || !(chunk.page_start || doc.laid_out)) { item.scrollIntoView({block: "nearest"}); return; }
    const boxes = await api("GET", `/v1/chunks/${chunk.chunk_id}/boxes`);
    let first = null;
    for (const page of boxes.data?.pages || []) {
      const figure = showPage(page.page);
      for (const [x0, y0, x1, y1] of page.boxes) {
        const box = el("div", {class: "box", "data-chunk-id": String(chunk.chunk_id)});
        box.style.left = `${x0 * 100}%`; box.style.top = `${y0 * 100}%`;
        box.style.width = `${(x1 - x0) * 100}%`; box.style.height = `${(y1 - y0) * 100}%`;
        figure.append(box);
        first = first || box;
      }
    }
    (first || showPage(chunk.page_start))?.scrollIntoView({block: "center"});
  };
  for (const chunk of doc.chunks) {
    const where = [chunk.page_start && !doc.laid_out ? `p. ${chunk.page_start}${chunk.page_end && chunk.page_end !== chunk.page_start ? "–" + chunk.page_end : ""}` : "",
                   chunk.section_path.join(" › "), chunk.language, `${chunk.token_count} tokens`, chunk.ocr ? "OCR" : ""];
    const item = el("li", {class: "chunk", "data-chunk-id": String(chunk.chunk_id)},
                    el("p", {class: "where", text: where.filter(Boolean).join(" · ")}), el("p", {class: "text", text: chunk.text}));
    item.addEventListener("click", () => select(chunk, item));
    list.append(item);
  }
  const startPage = Number(body.startPage) || (doc.chunks[0]?.page_start ?? 0);
  for (let number = 1; number <= doc.page_images; number++) showPage(number);
  const wanted = doc.chunks.find((chunk) => String(chunk.chunk_id) === body.chunk);
  if (wanted) select(wanted, list.querySelector(`li[data-chunk-id="${wanted.chunk_id}"]`));
  else if (startPage) showPage(startPage)?.scrollIntoView();
}

// -- sources -----------------------------------------------------------------------------------------------------

function sourceRow(source, admin) {
  const status = source.paused ? "paused" : source.last_sync_error ? "failing" : "syncing";
  const actions = el("td", {class: "actions"});
  if (admin) {
    const act = (label, path) => {
      const button = el("button", {text: label, "data-action": path});
      button.addEventListener("click", async () => {
        button.disabled = true;
        const result = await api("POST", `/v1/sources/${source.source_id}/${path}`);
        if (result.status === 200) sourceRow(result.data, admin);
        else { button.disabled = false; actions.append(el("span", {class: "error", text: " " + errorMessage(result)})); }
        if (result.status === 202) actions.append(el("span", {class: "note", text: " " + result.data.detail}));
      });
      return button;
    };
    actions.append(source.paused ? act("Resume", "resume") : act("Pause", "pause"));
    if (!source.paused) actions.append(" ", act("Sync now", "sync"));
  }
  const row = el("tr", {"data-source-id": String(source.source_id), "data-status": status},
                 el("td", {}, el("strong", {text: source.name}), el("br"), el("small", {class: "note", text: source.uri})),
                 el("td", {}, el("span", {class: `badge ${status === "failing" ? "failed" : status === "paused" ? "" : "ok"}`,
                                          text: status}),
                    ...(source.last_sync_error ? [el("br"), el("small", {class: "error", text: source.last_sync_error})] : [])),
                 ...[source.active_objects, source.queued_objects, source.skipped_objects, source.failed_objects,
                     source.deleted_objects].map((n) => el("td", {text: String(n)})),
                 el("td", {text: source.last_sync_at ? new Date(source.last_sync_at).toLocaleString() : "never"}),
                 actions);
  const old = document.querySelector(`tr[data-source-id="${source.source_id}"]`);
  if (old) old.replaceWith(row); else document.querySelector("#sources tbody").append(row);
}

async function sourcesPage() {
  const status = document.getElementById("sources-status");
  const result = await api("GET", "/v1/sources?limit=200");
  if (result.status !== 200) { status.textContent = errorMessage(result); return; }
  for (const source of result.data.items) sourceRow(source, Boolean(document.body.dataset.admin));
  status.textContent = result.data.items.length ? "" : "No sources: an admin adds one with POST /v1/sources or `ingestion-pipeline sources add`.";
}

// -- retrieval test ----------------------------------------------------------------------------------------------

function evaluationPage() {
  const form = document.getElementById("evaluation-form");
  const text = document.getElementById("questions");
  const status = document.getElementById("evaluation-status");
  document.getElementById("questions-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) text.value = await file.text();
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.textContent = "asking…";
    const result = await api("POST", "/v1/search/evaluations", {questions: text.value, k: 10});
    if (result.status !== 200) { status.textContent = errorMessage(result); return; }
    status.textContent = `${result.data.questions} questions in ${result.data.seconds} s`;
    const table = document.getElementById("figures");
    table.hidden = false;
    table.querySelector("tbody").replaceChildren(...result.data.groups.map((group) => el("tr", {"data-group": group.group},
      ...[group.group, group.questions, group["hit@1"], group["hit@3"], group["hit@3 95%"], group["hit@10"],
          group["mrr@10"]].map((value) => el("td", {text: String(value)})))));
    document.getElementById("misses-title").hidden = !result.data.misses.length;
    document.getElementById("misses").replaceChildren(...result.data.misses.map((miss) => el("li", {"data-id": miss.id},
      el("p", {}, el("strong", {text: miss.question}), el("span", {class: "note", text: ` (${miss.id}, ${miss.kind}, ` +
        (miss.rank ? `found at ${miss.rank})` : "not in the top 10)")})),
      el("p", {class: "note", text: `expected from ${miss.document}: “${miss.answer}”`}),
      el("ol", {class: "got"}, ...miss.got.map((hit) => el("li", {}, citationLink(hit), el("blockquote", {text: hit.source.text})))))));
  });
}

const PAGES = {documents: documentsPage, upload: uploadPage, files: filesPage, search: searchPage,
               inspector: inspectorPage, sources: sourcesPage, evaluation: evaluationPage};
PAGES[document.body.dataset.page]?.();

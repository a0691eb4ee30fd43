// The siphon console: polls the admin API every two seconds and draws what it answers.
// Every call carries the admin token the operator typed (kept in this tab's sessionStorage);
// every refusal the API gives is shown with the API's own reason.
"use strict";

const POLL_MS = 2000;
const $ = (selector, root = document) => root.querySelector(selector);

/** An element with attributes (`text` sets its text) and children. */
function el(tag, attrs = {}, ...children) {
  const svg = tag === "svg" || tag === "polyline";
  const node = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "text") node.textContent = value;
    else if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

function token() {
  return sessionStorage.getItem("siphon.token") || "";
}

/** A call of the API: `{ok, status, body}`, where body is JSON or the API's text. */
async function api(method, path) {
  const headers = {};
  if (token()) headers.Authorization = "Bearer " + token();
  let response;
  try {
    response = await fetch(path, { method, headers, cache: "no-store" });
  } catch (e) {
    return { ok: false, status: 0, body: "the daemon does not answer (" + e.message + ")" };
  }
  const text = await response.text();
  let body = text;
  try { body = JSON.parse(text); } catch (_) { /* text */ }
  return { ok: response.ok, status: response.status, body };
}

/** Why the API refused, in words an operator can act on. */
function refusal(what, answer) {
  const reason = typeof answer.body === "string" ? answer.body.trim() : JSON.stringify(answer.body);
  if (answer.status === 0) return what + ": " + reason;
  let hint = "";
  if (answer.status === 401) hint = " Enter the daemon's admin token (admin.token) above.";
  const stop = /[.!?]$/.test(reason) ? "" : ".";
  return what + " refused (HTTP " + answer.status + "): " + reason + stop + hint;
}

/** Shows `text` in the status line (what reading the API met) or the action line (what the
 * last action met); `kind` "info" for what went well. */
function say(text, line, kind = "error") {
  const box = $("#" + line + "-message");
  box.textContent = text;
  box.className = "message" + (kind === "info" ? " info" : "");
  box.hidden = false;
}
function unsay(line) {
  $("#" + line + "-message").hidden = true;
}

// ---- confirmation of actions -------------------------------------------------------------

let confirmed = null;
function confirmAction(text) {
  $("#confirm-text").textContent = text;
  $("#confirm").showModal();
  return new Promise((resolve) => { confirmed = resolve; });
}
function answerConfirm(yes) {
  $("#confirm").close();
  if (confirmed) confirmed(yes);
  confirmed = null;
}

async function act(description, method, path) {
  if (!(await confirmAction(description + "?"))) return;
  const answer = await api(method, path);
  if (answer.ok) say(description + ": accepted.", "action", "info");
  else say(refusal(description, answer), "action");
  poll();
}

// ---- plots --------------------------------------------------------------------------------

/** An SVG polyline of `values`, scaled to its box; the values are in `data-points`. */
function spark(svg, values) {
  const points = values.map((v) => +v.toFixed(2));
  const attr = points.join(",");
  if (svg.getAttribute("data-points") === attr) return;
  svg.setAttribute("data-points", attr);
  const max = Math.max(1, ...points);
  const step = points.length > 1 ? 140 / (points.length - 1) : 0;
  const line = points.map((v, i) => (i * step).toFixed(1) + "," + (31 - (v / max) * 29).toFixed(1));
  svg.replaceChildren(el("polyline", { points: line.join(" ") }));
  svg.setAttribute("aria-label", "max " + max.toFixed(1));
}

function format(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}
function duration(s) {
  if (!Number.isFinite(s)) return "–";
  if (s < 90) return s.toFixed(0) + " s";
  if (s < 5400) return (s / 60).toFixed(0) + " min";
  return (s / 3600).toFixed(1) + " h";
}

// ---- the page -----------------------------------------------------------------------------

function pipelineSection(name) {
  let section = $(`.pipeline[data-pipeline="${CSS.escape(name)}"]`);
  if (section) return section;
  const tables = el("input", { type: "text", class: "snapshot-tables",
    placeholder: "schema.table, …", "aria-label": "tables to snapshot" });
  const button = (action, text, handler, danger) => {
    const b = el("button", { type: "button", "data-action": action, class: danger ? "danger" : null, text });
    b.addEventListener("click", handler);
    return b;
  };
  const base = "/api/pipelines/" + encodeURIComponent(name) + "/snapshot";
  section = el("section", { class: "pipeline", "data-pipeline": name },
    el("h2", { text: "Pipeline " + name }),
    el("div", { class: "facts source" }),
    el("div", { class: "error source-error" }),
    el("div", { class: "facts log" }),
    el("h3", { text: "Incremental snapshot" }),
    el("div", { class: "snapshot" },
      el("progress", { max: "1", value: "0" }),
      el("div", { class: "snapshot-text muted", text: "none asked for" })),
    el("div", { class: "actions" }, tables,
      button("snapshot-start", "Snapshot", () => {
        const list = tables.value.trim();
        if (!list) { say("Name the tables to snapshot: schema.table, comma-separated.", "action"); return; }
        act("Start an incremental snapshot of " + list + " in " + name, "POST",
          base + "?tables=" + encodeURIComponent(list));
      }),
      button("snapshot-pause", "Pause", () => act("Pause the incremental snapshot of " + name, "POST", base + "/pause")),
      button("snapshot-resume", "Resume", () => act("Resume the incremental snapshot of " + name, "POST", base + "/resume")),
      button("snapshot-stop", "Stop", () => act("Stop the incremental snapshot of " + name + " (the tables left are forgotten)", "POST", base + "/stop"), true)),
    el("h3", { text: "Sinks" }),
    el("div", { class: "table" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["sink", "state", "events/s", "lag", "applied", "dead letters", "error", "replay"]
        .map((h) => el("th", { text: h })))),
      el("tbody"))));
  $("#pipelines").append(section);
  return section;
}

function sinkRow(section, pipeline, name) {
  let row = $(`tr.sink[data-sink="${CSS.escape(name)}"]`, section);
  if (row) return row;
  const from = el("input", { type: "number", min: "0", value: "0", class: "replay-from", "aria-label": "replay from offset" });
  const reset = el("input", { type: "checkbox", class: "replay-reset" });
  const replay = el("button", { type: "button", "data-action": "replay", class: "danger", text: "Replay" });
  replay.addEventListener("click", () => {
    const offset = Number(from.value || "0");
    if (!Number.isSafeInteger(offset) || offset < 0) {
      say("Replay sink " + name + ": the offset to replay from is a whole number, 0 or more.", "action");
      return;
    }
    const path = "/api/pipelines/" + encodeURIComponent(pipeline) + "/sinks/" + encodeURIComponent(name)
      + "/replay?from=" + offset + (reset.checked ? "&reset=true" : "");
    act("Replay sink " + name + " from offset " + offset + (reset.checked ? ", resetting its store" : ""), "POST", path);
  });
  const cell = (cls, label, ...children) => el("td", { class: cls, "data-label": label }, ...children);
  row = el("tr", { class: "sink", "data-sink": name },
    cell("name", "sink", el("b", { text: name }), el("div", { class: "kind muted" })),
    cell("state-cell", "state", el("span", { class: "state" }), el("div", { class: "needs-replay error" })),
    cell("num", "events/s", el("span", { class: "rate" }),
      el("svg", { class: "spark", "data-sink": name, "data-series": "rate", viewBox: "0 0 140 32", preserveAspectRatio: "none", role: "img" })),
    cell("num", "lag", el("span", { class: "lag" }),
      el("svg", { class: "spark lag", "data-sink": name, "data-series": "lag", viewBox: "0 0 140 32", preserveAspectRatio: "none", role: "img" })),
    cell("applied", "applied", el("span", { class: "offset" }), el("div", { class: "position muted" })),
    cell("num dead", "dead letters"),
    cell("error", "error"),
    cell("replay", "replay", el("span", { class: "replay" }, "from", from, el("label", {}, reset, " reset"), replay)));
  $("tbody", section).append(row);
  return row;
}

function drawSnapshot(section, metrics, samples, pipeline) {
  const m = (k) => metrics["incremental_snapshot_" + k];
  const box = $(".snapshot", section);
  const bar = $("progress", box);
  const text = $(".snapshot-text", box);
  const asked = m("requests") || 0;
  const done = m("requests_done") || 0;
  const left = m("tables_left") || 0;
  const rows = m("rows") || 0;
  const tableRows = m("table_rows") || 0;
  // The database's estimate of the table's size: 0 for a table never analyzed.
  const estimated = m("table_rows_estimate") || 0;
  const estimate = Math.max(estimated, tableRows);
  // Rows a second over the last ten samples.
  const recent = samples.slice(-11).map((s) => [s.t, s.pipelines[pipeline] ? s.pipelines[pipeline].snapshot_rows : 0]);
  let rate = 0;
  if (recent.length > 1) {
    const [t0, r0] = recent[0];
    const [t1, r1] = recent[recent.length - 1];
    if (t1 > t0) rate = Math.max(0, (r1 - r0) / ((t1 - t0) / 1000));
  }
  box.dataset.tablesLeft = left;
  box.dataset.rows = rows;
  if (!asked) {
    bar.value = 0;
    text.textContent = "none asked for";
    box.dataset.state = "none";
  } else if (done < asked) {
    bar.removeAttribute("value");
    text.textContent = "asked for; waiting for the source to take it";
    box.dataset.state = "asked";
  } else if (left > 0) {
    // Without an estimate the bar only moves; with one it stops short of its end until the
    // snapshot is done (an estimate can be low).
    if (estimated > 0) bar.value = Math.min(0.99, tableRows / estimate);
    else bar.removeAttribute("value");
    const paused = m("paused") ? "paused; " : "";
    const ofTable = estimated > 0 ? format(tableRows) + " of about " + format(estimate) : format(tableRows);
    const timeLeft = rate > 0 && estimated > tableRows ? ", this table done in about " + duration((estimated - tableRows) / rate) : "";
    const speed = paused ? "" : ", " + format(rate) + " rows/s" + timeLeft;
    text.textContent = paused + format(left) + " table(s) left; " + format(rows) + " rows read ("
      + ofTable + " in this table)" + speed;
    box.dataset.state = m("paused") ? "paused" : "running";
  } else {
    bar.value = 1;
    text.textContent = "done: " + format(rows) + " rows read";
    box.dataset.state = "done";
  }
}

function draw(statuses, history) {
  const samples = history ? history.samples : [];
  for (const p of statuses) {
    const section = pipelineSection(p.name);
    const source = p.source;
    const facts = $(".source", section);
    facts.replaceChildren(
      el("span", {}, "source ", el("b", { text: source.kind })),
      el("span", { class: "state " + source.state, "data-state": source.state, text: source.state.replace("_", " ") }),
      el("span", { text: "behind the database " + duration(p.source_behind_ms / 1000) }),
      ...Object.entries(p.source_metrics)
        .filter(([k]) => /lag|behind/.test(k) && !k.startsWith("incremental"))
        .map(([k, v]) => el("span", { text: k.replaceAll("_", " ") + " " + (k.includes("bytes") ? bytes(v) : format(v)) })));
    $(".source-error", section).textContent = source.last_error && source.state !== "running" ? source.last_error : "";
    const log = p.log;
    $(".log", section).replaceChildren(
      el("span", {}, "log offsets ", el("b", { text: format(log.start_offset) + " … " + format(log.end_offset) })),
      el("span", { text: bytes(log.size_bytes) + " in " + log.segments + " segment(s)" }),
      el("span", { text: "retention: " + (p.log_retention || "–") }),
      el("span", { text: format(p.records_appended) + " appended since start" }));
    drawSnapshot(section, p.source_metrics, samples, p.name);
    for (const [name, s] of Object.entries(p.sinks)) {
      const row = sinkRow(section, p.name, name);
      const series = samples.map((sample) => (sample.pipelines[p.name] || { sinks: {} }).sinks[name]).filter(Boolean);
      const last = series[series.length - 1];
      $(".kind", row).textContent = s.kind;
      const state = $(".state", row);
      state.textContent = s.state.replace("_", " ");
      state.className = "state " + s.state;
      row.dataset.state = s.state;
      $(".needs-replay", row).textContent = s.lost ? "needs a replay" : "";
      $(".rate", row).textContent = last ? format(last.rate) : "–";
      $(".lag", row).textContent = format(s.lag_records) + " rec, " + duration(s.lag_ms / 1000);
      spark($('svg[data-series="rate"]', row), series.map((x) => x.rate));
      spark($('svg[data-series="lag"]', row), series.map((x) => x.lag_records));
      $(".offset", row).textContent = "offset " + format(s.next_offset);
      $(".position", row).textContent = s.applied_position || "";
      row.querySelector(".dead").textContent = format(s.dead_lettered);
      row.querySelector("td.error").textContent = s.last_error && s.state !== "running" ? s.last_error : "";
    }
  }
  if (history) {
    const list = $("#notices");
    const notices = history.notices.slice().reverse();
    list.replaceChildren(...(notices.length ? notices.map((n) => el("li", { class: n.kind },
      el("span", { class: "muted", text: new Date(n.t).toLocaleTimeString() + " " + n.pipeline + " / " + n.component + " " }),
      el("b", { text: n.kind === "dead_letter" ? "dead-lettered " : "error " }),
      el("span", { text: n.message + (n.repeats ? " (" + (n.repeats + 1) + " times)" : "") }))) : [el("li", { class: "muted", text: "none" })]));
  }
}

// The samples this page has, of the chosen range: each poll asks for the newer ones only.
const KEPT = { minutes: 15 * 60, hours: 24 * 60 };
let history = { range: null, samples: [], notices: [] };

let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    const range = $("#range").value;
    if (history.range !== range) history = { range, samples: [], notices: [] };
    const last = history.samples[history.samples.length - 1];
    const [statuses, newer] = await Promise.all([
      api("GET", "/api/pipelines"),
      api("GET", "/api/history?range=" + range + (last ? "&since=" + last.t : "")),
    ]);
    if (!statuses.ok) {
      say(refusal("Reading the pipelines' status", statuses), "status");
      $("#updated").textContent = "not updated";
      return;
    }
    unsay("status");
    if (newer.ok && history.range === range) {
      history.samples.push(...newer.body.samples);
      history.samples.splice(0, Math.max(0, history.samples.length - KEPT[range]));
      history.notices = newer.body.notices;
    }
    draw(statuses.body, newer.ok ? history : null);
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
  } finally {
    polling = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token").value = token();
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("siphon.token", $("#token").value.trim());
    unsay("action");
    poll();
  });
  $("#range").addEventListener("change", poll);
  $("#confirm-yes").addEventListener("click", () => answerConfirm(true));
  $("#confirm-no").addEventListener("click", () => answerConfirm(false));
  $("#confirm").addEventListener("cancel", () => answerConfirm(false));
  poll();
  setInterval(poll, POLL_MS);
});

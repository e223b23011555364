// The console: polls /v1/console/fleet and a response's timeline with the key as a bearer
// header. The key stays in this tab's sessionStorage; the response id in the URL's fragment.
"use strict";

const ACTIVE = new Set(["queued", "in_progress"]);
const $ = (id) => document.getElementById(id);
let key = sessionStorage.getItem("antwort-key") || "";
let timelineTimer = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "style") Object.assign(node.style, value);
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function getJSON(path) {
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  const answer = await fetch(path, { headers, cache: "no-store" });
  const body = await answer.json().catch(() => ({}));
  if (answer.status === 401) {
    $("key-form").hidden = false;
    throw new Error(key ? "That key was refused." : "This fleet wants an API key.");
  }
  if (!answer.ok) throw new Error((body.error && body.error.message) || `HTTP ${answer.status}`);
  return body;
}

function showError(error) {
  $("error").hidden = !error;
  $("error").textContent = error ? error.message : "";
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  return value < 60 ? `${value.toFixed(1)} s` : `${Math.floor(value / 60)} min ${Math.round(value % 60)} s`;
}

function renderFleet(fleet) {
  let workers = 0, waiting = 0;
  const rows = fleet.queues.map((queue) => {
    workers += queue.workers.length;
    waiting += queue.depth;
    const names = queue.workers.map((w) => el("span", { class: "worker", title: `heartbeat ${w.last_heartbeat_seconds_ago} s ago` }, w.name));
    return el("tr", { "data-queue": queue.name },
      el("td", {}, queue.name),
      el("td", { class: "num" }, String(queue.depth)),
      el("td", { class: queue.oldest ? "num" : "idle" }, queue.oldest ? seconds(queue.oldest.age_seconds) : "none"),
      el("td", { class: queue.workers.length ? "" : "bare" }, ...(names.length ? names : ["no worker"])));
  });
  $("queues").tBodies[0].replaceChildren(...rows);
  $("in-flight").textContent = String(fleet.responses_in_flight);
  $("workers-total").textContent = String(workers);
  $("queued-total").textContent = String(waiting);
  $("failures").replaceChildren(...fleet.recent_failures.slice(0, 5).map((f) =>
    el("div", {}, `${f.kind} ${f.code} ×${f.count}, last ${seconds(f.last_seconds_ago)} ago`)));
  $("fleet-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function pollFleet() {
  try {
    renderFleet(await getJSON("/v1/console/fleet"));
    showError(null);
  } catch (error) {
    showError(error);
  }
  setTimeout(pollFleet, 2000);
}

function niceStep(span) {
  const steps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
  return steps.find((step) => span / step <= 8) || 1200;
}

function renderAxis(span) {
  const step = niceStep(span);
  const ticks = [];
  for (let t = 0; t <= span + 1e-9; t += step) {
    ticks.push(el("span", { style: { left: `${(t / span) * 100}%` } }, seconds(t)));
  }
  return el("div", { class: "axis" }, el("span", {}, ""), el("div", { class: "ticks" }, ...ticks), el("span", {}, ""));
}

function barNode(cls, from, to, origin, span, running) {
  const left = ((from - origin) / span) * 100;
  const width = Math.max(((to - from) / span) * 100, 0.2);
  return el("div", { class: `bar ${cls}${running ? " running" : ""}`, style: { left: `${left}%`, width: `${width}%` } });
}

function renderRow(bar, origin, span, now) {
  const running = bar.started_at !== null && bar.ended_at === null;
  const end = bar.ended_at === null ? now : bar.ended_at;
  const track = el("div", { class: "track" });
  if (bar.queued_at !== null && bar.started_at !== null && bar.started_at > bar.queued_at) {
    const wait = barNode("wait", bar.queued_at, bar.started_at, origin, span, false);
    wait.title = `waited ${seconds(bar.started_at - bar.queued_at)} in ${bar.queue}`;
    track.append(wait);
  }
  if (bar.started_at !== null) {
    const run = barNode(bar.type, bar.started_at, end, origin, span, running);
    if (bar.first_output_at !== null) {
      const at = ((bar.first_output_at - bar.started_at) / Math.max(end - bar.started_at, 1e-6)) * 100;
      run.append(el("i", { class: "tick", style: { left: `${Math.min(at, 100)}%` }, title: "first output" }));
    }
    track.append(run);
  }
  const where = bar.type === "model" ? "" : bar.worker || "";
  const title = [bar.label, bar.queue, bar.worker].filter(Boolean).join(" · ");
  const label = el("div", { class: "label", title }, bar.label, el("small", {}, where));
  const duration = bar.started_at === null ? "waiting" : seconds(end - bar.started_at) + (running ? " …" : "");
  return el("div", { class: "row", "data-type": bar.type, "data-turn": String(bar.turn) }, label, track, el("div", { class: "dur" }, duration));
}

function renderTimeline(timeline) {
  const now = timeline.now;
  const times = timeline.bars.flatMap((b) => [b.queued_at, b.started_at, b.ended_at]).filter((t) => t !== null);
  const origin = Math.min(timeline.started_at, ...times);
  const last = ACTIVE.has(timeline.status) ? now : Math.max(...times, origin + 0.001);
  const span = Math.max(last - origin, 0.001);
  const turns = new Set(timeline.bars.filter((b) => b.type === "turn").map((b) => b.turn)).size;
  const tools = timeline.bars.filter((b) => b.type === "tool").length;
  $("summary").replaceChildren(
    el("b", {}, timeline.response_id), " ", el("span", { class: `status ${timeline.status}` }, timeline.status),
    ` · ${timeline.model} · ${turns} turn${turns === 1 ? "" : "s"} · ${tools} tool call${tools === 1 ? "" : "s"} · ${seconds(span)} · ${timeline.events} events`);
  const rows = timeline.bars.map((bar) => renderRow(bar, origin, span, now));
  $("waterfall").replaceChildren(renderAxis(span), ...(rows.length ? rows : [el("div", { class: "empty" }, "No turn has started yet.")]));
  return ACTIVE.has(timeline.status);
}

async function pollTimeline(responseId) {
  clearTimeout(timelineTimer);
  try {
    const live = renderTimeline(await getJSON(`/v1/console/responses/${encodeURIComponent(responseId)}/timeline`));
    showError(null);
    if (live) timelineTimer = setTimeout(() => pollTimeline(responseId), 1000);
  } catch (error) {
    showError(error);
  }
}

function showResponse() {
  const responseId = decodeURIComponent(location.hash.slice(1));
  $("response-id").value = responseId;
  if (responseId) pollTimeline(responseId);
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  key = $("key").value.trim();
  sessionStorage.setItem("antwort-key", key);
  $("key-form").hidden = true;
  showError(null);
  showResponse();
});
$("response-form").addEventListener("submit", (event) => {
  event.preventDefault();
  location.hash = encodeURIComponent($("response-id").value.trim());
});
window.addEventListener("hashchange", showResponse);
pollFleet();
showResponse();

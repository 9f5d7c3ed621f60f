// The chunk stepper in the browser: every chunk's views arrive once, in the render message's payload, and
// Previous, Next, Play/Pause, the slider and the arrow keys show another chunk with no message to the server,
// except on pages that ask for reports (they draw a chunk's views on the server): there the chunk shown is
// sent back as the component's value, and the server runs the page for it.
//
// The payload (app/browser_stepper.py, StepperPayload.to_json; the same fields, the same meaning):
//   id           names the sample, the page's settings and the chunks held: a new id is redrawn, the same one not
//   sample       names the sample alone: across payloads and pages of one sample the chunk shown is kept
//   offset       the first chunk held (a long trace arrives a page at a time; chunks keep the trace's numbers)
//   count        how many chunks are held: offset … offset + count − 1
//   total        the trace's chunks
//   rows         the layout under the controls: {heading} or {widths: [fr, …], columns: [[cell name, …], …]}
//   views        a view's name → one view per chunk held: a Plotly figure ({data, layout}), an HTML text, an image URL;
//                for a view in drawn, the leaves ([path, value] pairs) that make the drawn figure that chunk's
//   kinds        a cell name → "figure", "html" or "image"
//   labels       a cell name → the caption above it (absent: none)
//   heights      a cell name → its height in pixels (null: the figure's own)
//   events       per chunk held, what happens in it, in words (under the counter)
//   template     the figures' Plotly template, sent once: a figure without a template of its own takes it
//   drawn        a view's name → its figure drawn once for the page, where chunks differ only in their leaves
//   reports      whether the chunk shown is sent back to the server ({chunk, sample, moves})
//   interval_ms  Play's pace, milliseconds a chunk
//   start        the server's chunk: where a new sample opens, and where a move of the server's goes
//   moves        how many times the server moved the chunk itself: when it changes, the stepper goes to start
//
// The chunk shown is remembered for the browser tab (sessionStorage) with the sample and the moves it was shown
// under, so another page of the same sample opens where this one was left.
"use strict";

const CONFIG = { displaylogo: false, responsive: true, toImageButtonOptions: { format: "png", scale: 2 } };
const REMEMBERED = "tensor-memory.chunk"; // sessionStorage key: {sample, moves, chunk}
let view = null; // { payload, chunk, reported, timer }

function send(type, data) {
  window.parent.postMessage({ isStreamlitMessage: true, type, ...data }, "*");
}

function element(tag, attributes = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  children.forEach((child) => node.appendChild(child));
  return node;
}

function button(id, label, icon, primary) {
  const node = element("button", { id, type: "button", class: primary ? "primary" : "" });
  node.appendChild(element("span", { "aria-hidden": "true", text: icon + " " }));
  node.appendChild(element("span", { class: "name", text: label }));
  return node;
}

function first(payload) { return payload.offset; }
function last(payload) { return first(payload) + payload.count - 1; }

// The cells' layout of a payload: a payload laid out as the one shown (another page of a long trace) keeps the
// cells and their plots, which Plotly then redraws in place (its 3D scenes keep their WebGL contexts).
function arrangement(payload) { return JSON.stringify([payload.rows, payload.kinds, payload.labels]); }

function build(payload) {
  const root = document.getElementById("root");
  const arranged = arrangement(payload);
  if (root.dataset.arranged !== arranged) lay(root, payload);
  root.dataset.arranged = arranged;
  const slider = document.getElementById("slider");
  slider.min = String(first(payload));
  slider.max = String(last(payload));
}

function lay(root, payload) {
  root.querySelectorAll(".js-plotly-plot").forEach((node) => Plotly.purge(node)); // frees their WebGL contexts
  root.replaceChildren();
  const slider = element("input", { id: "slider", type: "range", step: "1", "aria-label": "Chunk" });
  const stepper = element("div", { class: "stepper", role: "group", "aria-label": "Chunk stepper" }, [
    element("div", { class: "controls" }, [
      element("div", { class: "buttons" }, [button("previous", "Previous", "‹", false),
                                            button("play", "Play", "▶", true), button("next", "Next", "›", false)]),
      slider,
      element("div", { class: "counter" }, [element("h4", { id: "counter", "aria-live": "polite" }),
                                            element("div", { id: "event", class: "caption" })]),
    ]),
    element("div", { id: "cell-track" }),
  ]);
  root.appendChild(stepper);
  for (const row of payload.rows) {
    if (row.heading) { root.appendChild(element("div", { class: "heading", text: row.heading })); continue; }
    const node = element("div", { class: "row", style: `grid-template-columns: ${row.widths.join("fr ")}fr` });
    for (const column of row.columns) {
      const cell = element("div");
      for (const name of column) {
        const kind = payload.kinds[name];
        if (payload.labels[name]) cell.appendChild(element("div", { class: "label", text: payload.labels[name] }));
        if (kind === "image") cell.appendChild(element("img", { id: `cell-${name}`, alt: payload.labels[name] || name }));
        else cell.appendChild(element("div", { id: `cell-${name}`, class: kind === "html" ? "" : "figure" }));
      }
      node.appendChild(cell);
    }
    root.appendChild(node);
  }
  document.getElementById("previous").addEventListener("click", () => { stop(); show(view.chunk - 1); });
  document.getElementById("next").addEventListener("click", () => { stop(); show(view.chunk + 1); });
  document.getElementById("play").addEventListener("click", () => (view.timer ? stop() : play()));
  slider.addEventListener("input", () => { stop(); show(Number(slider.value)); });
}

// The figure of a view in payload.drawn at one chunk: a copy of the drawn figure with the chunk's leaves put in
// (a copy: Plotly writes into the figure it draws, and the drawn one serves every chunk).
function patched(drawn, leaves) {
  const figure = structuredClone(drawn);
  for (const [path, value] of leaves) {
    let node = figure;
    for (const key of path.slice(0, -1)) node = node[key] ?? (node[key] = {});
    node[path[path.length - 1]] = value;
  }
  return figure;
}

function show(chunk) {
  const payload = view.payload;
  const low = first(payload), high = last(payload);
  chunk = Math.min(Math.max(chunk, low), high);
  view.chunk = chunk;
  for (const [name, values] of Object.entries(payload.views)) {
    const node = document.getElementById(`cell-${name}`);
    const held = values[chunk - low];
    const value = payload.drawn[name] ? patched(payload.drawn[name], held) : held;
    if (payload.kinds[name] === "image") node.src = value;
    else if (payload.kinds[name] === "html") node.innerHTML = value;
    else {
      const height = payload.heights[name] || value.layout.height || 450; // pixels, the div and the figure alike
      node.style.height = `${height}px`;
      const template = value.layout.template || payload.template; // sent once, not with every figure
      Plotly.react(node, value.data, { ...value.layout, template, height, uirevision: name }, CONFIG);
    }
  }
  const total = payload.total;
  document.getElementById("counter").textContent = `Chunk ${chunk} / ${total - 1}`;
  const loaded = payload.count < total ? ` · chunks ${low}–${high} loaded` : "";
  document.getElementById("event").textContent = payload.events[chunk - low] + loaded;
  document.getElementById("slider").value = String(chunk);
  document.getElementById("previous").disabled = chunk === low;
  document.getElementById("next").disabled = chunk === high;
  document.getElementById("play").disabled = high === low;
  remember(payload, chunk);
  if (payload.reports && chunk !== view.reported) {
    view.reported = chunk;
    send("streamlit:setComponentValue", { value: { chunk, sample: payload.sample, moves: payload.moves },
                                          dataType: "json" });
  }
}

function remember(payload, chunk) {
  try {
    sessionStorage.setItem(REMEMBERED, JSON.stringify({ sample: payload.sample, moves: payload.moves, chunk }));
  } catch (error) { /* storage off: each page opens where the server is */ }
}

// The chunk to open a payload on: the one this tab last showed of the sample, if the server has not moved since
// and the payload holds it; else the server's.
function opening(payload) {
  let kept = null;
  try { kept = JSON.parse(sessionStorage.getItem(REMEMBERED)); } catch (error) { /* storage off */ }
  const own = kept && kept.sample === payload.sample && kept.moves === payload.moves ? kept.chunk : null;
  return own !== null && own >= first(payload) && own <= last(payload) ? own : payload.start;
}

function setPlaying(playing) {
  const node = document.getElementById("play");
  if (!node) return;
  node.firstChild.textContent = playing ? "❚❚ " : "▶ ";
  node.lastChild.textContent = playing ? "Pause" : "Play";
}

function play() {
  if (view.chunk >= last(view.payload)) show(first(view.payload)); // playing from the end starts over
  setPlaying(true);
  view.timer = setInterval(() => {
    show(view.chunk + 1);
    if (view.chunk >= last(view.payload)) stop();
  }, view.payload.interval_ms);
}

function stop() {
  if (view && view.timer) clearInterval(view.timer);
  if (view) view.timer = null;
  setPlaying(false);
}

function onKey(event) {
  if (!view || event.target instanceof HTMLInputElement && event.target.type !== "range") return;
  if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
    event.preventDefault();
    stop();
    show(view.chunk + (event.key === "ArrowRight" ? 1 : -1));
  }
}

window.addEventListener("message", (event) => {
  if (!event.data || event.data.type !== "streamlit:render") return;
  const payload = event.data.args.payload;
  if (view && view.payload.id === payload.id && view.payload.moves === payload.moves) return; // nothing new
  const redraw = !view || view.payload.id !== payload.id;
  stop();
  view = { payload, chunk: opening(payload), reported: payload.start, timer: null };
  if (redraw) build(payload);
  show(view.chunk);
  send("streamlit:setFrameHeight", { height: document.documentElement.scrollHeight });
});
document.addEventListener("keydown", onKey);
try { // the page around the frame too, until this frame goes (another page of the app replaces it)
  const host = window.parent.document;
  host.addEventListener("keydown", onKey);
  window.addEventListener("pagehide", () => host.removeEventListener("keydown", onKey));
} catch (error) { /* another origin */ }
new ResizeObserver(() => send("streamlit:setFrameHeight", { height: document.documentElement.scrollHeight }))
  .observe(document.body);
send("streamlit:componentReady", { apiVersion: 1 });

// The chunk stepper in the browser: every chunk's views arrive once (the render message's payload);
// Previous, Next, Play/Pause, the slider and the arrow keys show another chunk with no message to the
// server. The payload names its rows of cells; a cell is a Plotly figure per chunk, an image per chunk
// or an HTML text per chunk, all indexed by the chunk. A long trace arrives a window at a time: the
// payload's chunks are offset … offset + count − 1 of total, and chunks keep the trace's own numbers.
"use strict";

const CONFIG = { displaylogo: false, responsive: true, toImageButtonOptions: { format: "png", scale: 2 } };
let view = null; // { payload, chunk, timer }

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

function first(payload) { return payload.offset || 0; }
function last(payload) { return first(payload) + payload.count - 1; }

function build(payload) {
  const root = document.getElementById("root");
  root.replaceChildren();
  const slider = element("input", { id: "slider", type: "range", min: String(first(payload)),
                                    max: String(last(payload)), step: "1",
                                    "aria-label": "Chunk" });
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
    for (const column of row.cells) {
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

function show(chunk) {
  const payload = view.payload;
  const low = first(payload), high = last(payload);
  chunk = Math.min(Math.max(chunk, low), high);
  view.chunk = chunk;
  for (const [name, values] of Object.entries(payload.cells)) {
    const node = document.getElementById(`cell-${name}`);
    const value = values[chunk - low];
    if (payload.kinds[name] === "image") node.src = value;
    else if (payload.kinds[name] === "html") node.innerHTML = value;
    else {
      const height = payload.heights[name] || value.layout.height || 450; // pixels, the div and the figure alike
      node.style.height = `${height}px`;
      const template = value.layout.template || payload.template; // sent once, not with every figure
      Plotly.react(node, value.data, { ...value.layout, template, height, uirevision: name }, CONFIG);
    }
  }
  const total = payload.total || payload.count;
  document.getElementById("counter").textContent = `Chunk ${chunk} / ${total - 1}`;
  const loaded = payload.count < total ? ` · chunks ${low}–${high} loaded` : "";
  document.getElementById("event").textContent = payload.events[chunk - low] + loaded;
  document.getElementById("slider").value = String(chunk);
  document.getElementById("previous").disabled = chunk === low;
  document.getElementById("next").disabled = chunk === high;
  document.getElementById("play").disabled = high === low;
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
  if (view && view.payload.id === payload.id) return; // the same sample and settings: nothing to redraw
  const same = view && view.payload.sample === payload.sample && view.chunk >= first(payload)
    && view.chunk <= last(payload); // the same sample, and its chunk in the window that arrived
  const keep = same ? view.chunk : payload.start;
  stop();
  view = { payload, chunk: keep, timer: null };
  build(payload);
  show(keep);
  send("streamlit:setFrameHeight", { height: document.documentElement.scrollHeight });
});
document.addEventListener("keydown", onKey);
try { window.parent.document.addEventListener("keydown", onKey); } catch (error) { /* another origin */ }
new ResizeObserver(() => send("streamlit:setFrameHeight", { height: document.documentElement.scrollHeight }))
  .observe(document.body);
send("streamlit:componentReady", { apiVersion: 1 });

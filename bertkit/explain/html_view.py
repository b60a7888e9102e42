"""One self-contained HTML file to explore attention, in the spirit of bertviz.

- a layer / head selector ("all heads" overlays them, one colour each),
- a head view: tokens on the left attend to tokens on the right; a line's weight is the
  attention weight; hovering a token keeps only its lines,
- the selected head's map as a matrix (hover a cell for its value),
- a model view: every layer x head as a thumbnail; a click selects it.

No network: the data is a JSON block inside the page, the script is inline, there are no
external fonts, styles or libraries. `page.html#layer=2&head=5` opens with that head selected.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any, Protocol

from ..files import atomic_write_text

if TYPE_CHECKING:
    from torch import Tensor

DECIMALS = 4  # attention weights are written with this many decimals


# `maps` below is an attention_view.AttentionMaps; this module reads its fields and imports nothing
# from there (attention_view imports this one for AttentionMaps.to_html / save_html).
class Maps(Protocol):
    """The fields of an attention_view.AttentionMaps this module reads."""

    @property
    def tokens(self) -> list[str]: ...
    @property
    def token_type_ids(self) -> list[int]: ...
    @property
    def maps(self) -> list[Tensor]: ...
    @property
    def head_ids(self) -> list[list[int]]: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def text_pair(self) -> str | None: ...
    @property
    def title(self) -> str: ...


def page_data(maps: Maps, title: str) -> dict[str, Any]:
    """What the page's script reads: tokens, segment ids and every head's (S, S) map."""
    layers = [
        {"heads": heads, "maps": [[[round(float(x), DECIMALS) for x in row] for row in m.tolist()] for m in layer_maps]}
        for heads, layer_maps in zip(maps.head_ids, maps.maps)
    ]
    return {
        "title": title,
        "text": maps.text,
        "pair": maps.text_pair,
        "tokens": maps.tokens,
        "types": maps.token_type_ids,
        "num_heads": maps.num_heads,
        "layers": layers,
    }


def _script_json(data: dict[str, Any]) -> str:
    """JSON that cannot end its <script> element early: <, > and & become \\u escapes."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def attention_html(maps: Maps, title: str | None = None) -> str:
    """The viewer page for `maps` (an AttentionMaps), as one string."""
    title = title or maps.title
    L = len(maps.maps)
    summary = (
        f"{len(maps.tokens)} tokens, {L} layers (run one after another) x {maps.num_heads} heads (run in parallel)"
    )
    fields = {
        "TITLE": html.escape(title),
        "SUMMARY": html.escape(summary),
        "DATA": _script_json(page_data(maps, title)),
    }
    return re.sub(r"\{\{(TITLE|SUMMARY|DATA)\}\}", lambda m: fields[m.group(1)], _PAGE)  # one pass


def save_html(maps: Maps, path: str, title: str | None = None) -> str:
    """Write the viewer page for `maps` (an AttentionMaps) to `path`; returns the page."""
    page = attention_html(maps, title)
    atomic_write_text(path, page)
    return page


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{TITLE}}</title>
<style>
  body { font: 14px/1.4 system-ui, "Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Micro Hei", "PingFang SC",
         "Microsoft YaHei", sans-serif; margin: 16px 24px; color: #222; background: #fff; }
  h1 { font-size: 20px; margin: 0 0 4px; }
  h2 { font-size: 16px; margin: 20px 0 6px; }
  .note { color: #555; margin: 2px 0; }
  #controls { margin: 12px 0; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
  select { font-size: 14px; padding: 2px 4px; }
  #status { font-weight: 600; }
  #head-view { display: flex; gap: 32px; align-items: flex-start; flex-wrap: wrap; }
  #cell { min-height: 1.4em; color: #333; }
  #model-view { display: grid; gap: 6px; align-items: center; justify-content: start; }
  .row-label { font-size: 12px; color: #555; text-align: right; padding-right: 4px; white-space: nowrap; }
  .col-label { font-size: 12px; color: #555; text-align: center; }
  .thumb { cursor: pointer; border: 2px solid transparent; display: block; }
  .thumb.selected { border-color: #d62728; }
  .pruned { width: 64px; height: 64px; display: flex; align-items: center; justify-content: center;
            font-size: 11px; color: #999; border: 1px dashed #ccc; }
</style>
</head>
<body>
<h1>{{TITLE}}</h1>
<p class="note">{{SUMMARY}}. Each head's weights from a token (left, the query) to every token (right, the key)
sum to 1.</p>
<div id="controls">
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
  <span id="status" data-layer="" data-head=""></span>
</div>
<h2>Head view</h2>
<p class="note">Line weight = attention weight. Hover a token to keep only its lines.</p>
<div id="head-view">
  <canvas id="lines"></canvas>
  <div>
    <canvas id="matrix"></canvas>
    <p id="cell"></p>
  </div>
</div>
<h2>Model view</h2>
<p class="note">Every layer (rows) x head (columns). Click a map to select it.</p>
<div id="model-view"></div>
<script type="application/json" id="bertkit-data">{{DATA}}</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("bertkit-data").textContent);
  var T = DATA.tokens, S = T.length, L = DATA.layers.length;
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];
  var VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  var FONT = '13px system-ui, "Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Micro Hei", "PingFang SC", ' +
             '"Microsoft YaHei", sans-serif';
  var ROW = 22, TOP = 30, GAP = 150;
  var state = {layer: 0, head: DATA.layers[0].heads[0], focus: null};

  function el(id) { return document.getElementById(id); }
  function mapOf(layer, head) { var l = DATA.layers[layer]; return l.maps[l.heads.indexOf(head)]; }
  function color(a) {  // viridis on a square-root scale, so that small weights stay visible
    var x = Math.sqrt(Math.max(0, Math.min(1, a))) * (VIRIDIS.length - 1);
    var i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    var f = x - i, c = VIRIDIS[i].map(function (v, k) { return Math.round(v + f * (VIRIDIS[i + 1][k] - v)); });
    return "rgb(" + c.join(",") + ")";
  }
  function canvas2d(canvas, w, h) {
    var r = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * r); canvas.height = Math.round(h * r);
    canvas.style.width = w + "px"; canvas.style.height = h + "px";
    var ctx = canvas.getContext("2d"); ctx.setTransform(r, 0, 0, r, 0, 0); return ctx;
  }
  function textWidth() {
    var ctx = document.createElement("canvas").getContext("2d"), w = 0; ctx.font = FONT;
    T.forEach(function (t) { w = Math.max(w, ctx.measureText(t).width); }); return Math.ceil(w) + 16;
  }
  var BOX = Math.max(60, textWidth());

  // ----- selectors -----
  function fillLayers() {
    var s = el("layer"); s.innerHTML = "";
    DATA.layers.forEach(function (l, i) {
      var o = document.createElement("option"); o.value = i;
      o.textContent = i + " (" + l.heads.length + " heads)"; s.appendChild(o);
    });
  }
  function fillHeads() {
    var s = el("head"); s.innerHTML = "";
    DATA.layers[state.layer].heads.forEach(function (h) {
      var o = document.createElement("option"); o.value = h; o.textContent = String(h); s.appendChild(o);
    });
    var all = document.createElement("option"); all.value = "all"; all.textContent = "all heads"; s.appendChild(all);
  }
  function select(layer, head) {
    layer = Math.max(0, Math.min(L - 1, layer | 0));
    var heads = DATA.layers[layer].heads;
    if (head !== "all") { head = parseInt(head, 10); if (heads.indexOf(head) < 0) head = heads[0]; }
    state.layer = layer; state.head = head; state.focus = null;
    el("layer").value = String(layer); fillHeads(); el("head").value = String(head);
    drawLines(); drawMatrix(); markThumb(); showStatus();
    try { history.replaceState(null, "", "#layer=" + layer + "&head=" + head); } catch (e) { /* file:// */ }
  }
  function showStatus() {
    var s = el("status"), text = "layer " + state.layer + ", head " + state.head;
    if (state.head !== "all") {
      var m = mapOf(state.layer, state.head), best = [0, 0, -1];
      for (var i = 0; i < S; i++) for (var j = 0; j < S; j++) if (m[i][j] > best[2]) best = [i, j, m[i][j]];
      text += ": strongest " + T[best[0]] + " \\u2192 " + T[best[1]] + " (" + best[2].toFixed(3) + ")";
    }
    s.textContent = text; s.dataset.layer = String(state.layer); s.dataset.head = String(state.head);
  }

  // ----- head view: lines between tokens -----
  function y(i) { return TOP + i * ROW + ROW / 2; }
  function drawLines() {
    var w = 2 * BOX + GAP, h = TOP + S * ROW + 8, ctx = canvas2d(el("lines"), w, h);
    ctx.font = FONT; ctx.textBaseline = "middle";
    ctx.fillStyle = "#666"; ctx.textAlign = "left"; ctx.fillText("from (query)", 2, 12);
    ctx.fillText("to (key)", BOX + GAP + 6, 12);
    var heads = state.head === "all" ? DATA.layers[state.layer].heads : [state.head], f = state.focus;
    heads.forEach(function (hd) {
      var m = mapOf(state.layer, hd); ctx.strokeStyle = COLORS[hd % COLORS.length];
      for (var i = 0; i < S; i++) {
        if (f && f.side === "left" && f.index !== i) continue;
        for (var j = 0; j < S; j++) {
          if (f && f.side === "right" && f.index !== j) continue;
          var a = m[i][j]; if (a < 0.005) continue;
          ctx.globalAlpha = Math.min(1, 0.15 + a); ctx.lineWidth = 0.5 + 4 * a;
          ctx.beginPath(); ctx.moveTo(BOX, y(i)); ctx.lineTo(BOX + GAP, y(j)); ctx.stroke();
        }
      }
    });
    ctx.globalAlpha = 1;
    for (var i = 0; i < S; i++) { token(ctx, i, "left"); token(ctx, i, "right"); }
  }
  function token(ctx, i, side) {
    var x = side === "left" ? 0 : BOX + GAP;
    var focus = state.focus && state.focus.side === side && state.focus.index === i;
    ctx.fillStyle = focus ? "#ffe08a" : (DATA.types[i] ? "#fde9d9" : "#eef2f7");
    ctx.fillRect(x + 2, y(i) - ROW / 2 + 2, BOX - 4, ROW - 4);
    ctx.fillStyle = "#222"; ctx.textAlign = side === "left" ? "right" : "left";
    ctx.fillText(T[i], side === "left" ? BOX - 8 : x + 8, y(i));
  }
  el("lines").addEventListener("mousemove", function (e) {
    var r = e.target.getBoundingClientRect(), x = e.clientX - r.left, i = Math.floor((e.clientY - r.top - TOP) / ROW);
    var f = null;
    if (i >= 0 && i < S && x < BOX) f = {side: "left", index: i};
    if (i >= 0 && i < S && x > BOX + GAP) f = {side: "right", index: i};
    if (JSON.stringify(f) !== JSON.stringify(state.focus)) { state.focus = f; drawLines(); }
  });
  el("lines").addEventListener("mouseleave", function () { state.focus = null; drawLines(); });

  // ----- the selected head as a matrix -----
  var CELL = Math.max(10, Math.min(28, Math.floor(420 / S)));
  function drawMatrix() {
    var pad = BOX, w = pad + S * CELL + 4, h = pad + S * CELL + 4, ctx = canvas2d(el("matrix"), w, h);
    var m = state.head === "all" ? meanMap(state.layer) : mapOf(state.layer, state.head);
    ctx.font = FONT; ctx.textBaseline = "middle"; ctx.fillStyle = "#222";
    for (var i = 0; i < S; i++) {
      ctx.textAlign = "right"; ctx.fillText(T[i], pad - 6, pad + i * CELL + CELL / 2);
      if (ctx.measureText(T[i]).width <= CELL) {  // a short token (one CJK character) stays upright
        ctx.textAlign = "center"; ctx.fillText(T[i], pad + i * CELL + CELL / 2, pad - 12);
      } else {
        ctx.save(); ctx.translate(pad + i * CELL + CELL / 2, pad - 6); ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left"; ctx.fillText(T[i], 0, 0); ctx.restore();
      }
      for (var j = 0; j < S; j++) {
        ctx.fillStyle = color(m[i][j]); ctx.fillRect(pad + j * CELL, pad + i * CELL, CELL, CELL);
      }
      ctx.fillStyle = "#222";
    }
  }
  function meanMap(layer) {
    var maps = DATA.layers[layer].maps, out = [];
    for (var i = 0; i < S; i++) { out.push([]); for (var j = 0; j < S; j++) {
      var s = 0; maps.forEach(function (m) { s += m[i][j]; }); out[i].push(s / maps.length); } }
    return out;
  }
  el("matrix").addEventListener("mousemove", function (e) {
    var r = e.target.getBoundingClientRect(), j = Math.floor((e.clientX - r.left - BOX) / CELL),
        i = Math.floor((e.clientY - r.top - BOX) / CELL);
    if (i < 0 || j < 0 || i >= S || j >= S) { el("cell").textContent = ""; return; }
    var m = state.head === "all" ? meanMap(state.layer) : mapOf(state.layer, state.head);
    el("cell").textContent = T[i] + " \\u2192 " + T[j] + ": " + m[i][j].toFixed(4) +
      (state.head === "all" ? " (mean of heads)" : "");
  });

  // ----- model view: every layer x head -----
  var THUMB = 64;
  function buildModelView() {
    var grid = el("model-view");
    grid.style.gridTemplateColumns = "auto repeat(" + DATA.num_heads + ", " + (THUMB + 4) + "px)";
    grid.appendChild(document.createElement("span"));
    for (var h = 0; h < DATA.num_heads; h++) {
      var c = document.createElement("span");
      c.className = "col-label"; c.textContent = "head " + h; grid.appendChild(c);
    }
    DATA.layers.forEach(function (l, li) {
      var label = document.createElement("span"); label.className = "row-label"; label.textContent = "layer " + li;
      grid.appendChild(label);
      for (var h = 0; h < DATA.num_heads; h++) {
        if (l.heads.indexOf(h) < 0) {
          var p = document.createElement("span"); p.className = "pruned"; p.textContent = "pruned"; grid.appendChild(p);
          continue;
        }
        var cv = document.createElement("canvas"); cv.className = "thumb"; cv.id = "thumb-" + li + "-" + h;
        cv.title = "layer " + li + ", head " + h; thumb(cv, mapOf(li, h));
        cv.addEventListener("click", (function (a, b) { return function () { select(a, b); }; })(li, h));
        grid.appendChild(cv);
      }
    });
  }
  function thumb(cv, m) {
    var ctx = canvas2d(cv, THUMB, THUMB), c = THUMB / S;
    for (var i = 0; i < S; i++) for (var j = 0; j < S; j++) {
      ctx.fillStyle = color(m[i][j]); ctx.fillRect(j * c, i * c, Math.ceil(c), Math.ceil(c));
    }
  }
  function markThumb() {
    var old = document.querySelectorAll(".thumb.selected");
    for (var k = 0; k < old.length; k++) old[k].classList.remove("selected");
    var heads = state.head === "all" ? DATA.layers[state.layer].heads : [state.head];
    heads.forEach(function (h) { var t = el("thumb-" + state.layer + "-" + h); if (t) t.classList.add("selected"); });
  }

  // ----- start -----
  function fromHash() {
    var q = {}; location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var p = kv.split("="); if (p.length === 2) q[p[0]] = decodeURIComponent(p[1]); });
    if (q.layer === undefined && q.head === undefined) return false;
    select(parseInt(q.layer || "0", 10), q.head === "all" ? "all" : parseInt(q.head || "0", 10)); return true;
  }
  fillLayers(); buildModelView();
  el("layer").addEventListener("change", function (e) { select(parseInt(e.target.value, 10), state.head); });
  el("head").addEventListener("change", function (e) { select(state.layer, e.target.value); });
  window.addEventListener("hashchange", fromHash);
  if (!fromHash()) select(0, DATA.layers[0].heads[0]);
  document.body.dataset.ready = "1";
})();
</script>
</body>
</html>
"""

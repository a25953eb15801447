// vk-observer board: the chart of attempts started / finished / failed per time bucket (the
// board's `chart`), drawn as SVG. Loaded before board.js, whose `el` and `$` it calls when the
// board is drawn; like board.js it writes every text through text nodes, never as HTML.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const SERIES = ['started', 'finished', 'failed'];

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function clock(iso) {
  return new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}
function widthWords(seconds) {
  return seconds >= 3600 ? `${seconds / 3600} h` : `${seconds / 60} min`;
}

// One group of three bars per bucket, its counts in data attributes and a tooltip (title).
function chartBars(chart, W, H) {
  const slot = W / chart.buckets.length;
  const bar = (slot - 1) / SERIES.length;
  const top = Math.max(1, ...chart.buckets.map((b) => Math.max(...SERIES.map((k) => b[k]))));
  return chart.buckets.map((b, i) => {
    const g = svg('g', { class: 'bucket', 'data-start': b.start, 'data-started': b.started,
      'data-finished': b.finished, 'data-failed': b.failed },
    svg('title', null, `${clock(b.start)}: ${b.started} started, ${b.finished} finished, ${b.failed} failed`));
    SERIES.forEach((k, j) => {
      if (!b[k]) return;
      const h = Math.max(2, (b[k] / top) * (H - 2));
      g.append(svg('rect', { class: `bar bar-${k}`, x: (i * slot + j * bar + 0.5).toFixed(2),
        y: (H - h).toFixed(2), width: bar.toFixed(2), height: h.toFixed(2) }));
    });
    return g;
  });
}

function renderChart(chart) {
  const box = $('chart');
  if (!chart || !chart.buckets.length) { box.replaceChildren(); return; }
  const [W, H] = [240, 60];
  const since = clock(chart.buckets[0].start);
  const per = widthWords(chart.bucket_seconds);
  const words = SERIES.map((k) => `${chart[k]} ${k}`).join(', ');
  const plot = svg('svg', { class: 'chart-plot', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none',
    role: 'img', 'aria-label': `Attempts per ${per} since ${since}: ${words}` },
  svg('line', { class: 'axis', x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5 }), ...chartBars(chart, W, H));
  box.replaceChildren(plot,
    el('div', { class: 'chart-axis meta' }, el('span', null, since), el('span', null, `per ${per}`), el('span', null, 'now')),
    el('figcaption', { class: 'legend' }, SERIES.map((k) =>
      el('span', { class: `key key-${k}`, 'data-series': k, 'data-count': chart[k] }, `${chart[k]} ${k}`))));
}

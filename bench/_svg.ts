/**
 * Small SVG charts for the benchmarks, written as text (no dependency, no external service): a line chart
 * of series over a log2 x axis and a log or linear y axis, and a log-log scatter with the y = x line.
 *
 * @module
 */

/** One series of a chart. */
export interface Series {
  /** Its legend. */
  name: string;
  /** Its points. */
  points: readonly { x: number; y: number }[];
}

const COLORS = [
  "#1f77b4",
  "#ff7f0e",
  "#2ca02c",
  "#d62728",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#7f7f7f",
  "#17becf",
];
const W = 720, H = 420, L = 70, R = 170, T = 40, B = 50;

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function logTicks(lo: number, hi: number): number[] {
  const out: number[] = [];
  for (let p = Math.floor(Math.log10(lo)); p <= Math.ceil(Math.log10(hi)); p++) out.push(10 ** p);
  return out.filter((v) => v >= lo / 1.0001 && v <= hi * 1.0001);
}

/** A size in bytes as an axis label: `1K`, `64M`. */
export function sizeLabel(bytes: number): string {
  return bytes >= 1 << 20 ? `${bytes / (1 << 20)}M` : bytes >= 1024 ? `${bytes / 1024}K` : `${bytes}`;
}

/**
 * A line chart: x on a log2 axis labelled as sizes, y on a log10 axis.
 *
 * @param title The title.
 * @param yLabel The y axis's label.
 * @param series The lines.
 * @returns The SVG document.
 */
export function lineChart(title: string, yLabel: string, series: readonly Series[]): string {
  const pts = series.flatMap((s) => s.points).filter((p) => p.y > 0);
  const xs = [...new Set(pts.map((p) => p.x))].sort((a, b) => a - b);
  const xlo = Math.log2(xs[0]), xhi = Math.log2(xs[xs.length - 1]);
  const ylo = Math.log10(Math.min(...pts.map((p) => p.y))),
    yhi = Math.log10(Math.max(...pts.map((p) => p.y)));
  const yl = Math.floor(ylo * 2) / 2, yh = Math.ceil(yhi * 2) / 2 || yl + 1;
  const px = (x: number): number => L + ((Math.log2(x) - xlo) / (xhi - xlo || 1)) * (W - L - R);
  const py = (y: number): number => T + (1 - (Math.log10(y) - yl) / (yh - yl || 1)) * (H - T - B);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2 - R / 2}" y="22" text-anchor="middle" font-size="14">${esc(title)}</text>`,
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>`,
  ];
  for (const x of xs) {
    out.push(`<text x="${px(x)}" y="${H - B + 16}" text-anchor="middle">${sizeLabel(x)}</text>`);
    out.push(`<line x1="${px(x)}" y1="${H - B}" x2="${px(x)}" y2="${H - B + 4}" stroke="black"/>`);
  }
  for (const y of logTicks(10 ** yl, 10 ** yh)) {
    out.push(`<line x1="${L}" y1="${py(y)}" x2="${W - R}" y2="${py(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${L - 6}" y="${py(y) + 4}" text-anchor="end">${y >= 1 ? y : y.toPrecision(1)}</text>`);
  }
  out.push(`<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">message size (bytes)</text>`);
  out.push(
    `<text x="16" y="${(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 ${(T + H - B) / 2})">${
      esc(yLabel)
    }</text>`,
  );
  series.forEach((s, i) => {
    const c = COLORS[i % COLORS.length];
    const line = s.points.filter((p) => p.y > 0).map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`);
    if (line.length > 1) {
      out.push(`<polyline fill="none" stroke="${c}" stroke-width="2" points="${line.join(" ")}"/>`);
    }
    for (const p of s.points) {
      if (p.y > 0) out.push(`<circle cx="${px(p.x)}" cy="${py(p.y)}" r="3" fill="${c}"/>`);
    }
    out.push(`<rect x="${W - R + 12}" y="${T + i * 18}" width="12" height="3" fill="${c}"/>`);
    out.push(`<text x="${W - R + 30}" y="${T + i * 18 + 5}">${esc(s.name)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n") + "\n";
}

/**
 * A log-log scatter of predicted against measured, with y = x and the ±20% band.
 *
 * @param title The title.
 * @param points The points (x measured, y predicted), by group.
 * @returns The SVG document.
 */
export function scatterChart(title: string, points: readonly Series[]): string {
  const all = points.flatMap((s) => s.points).filter((p) => p.x > 0 && p.y > 0);
  const lo = Math.floor(Math.log10(Math.min(...all.map((p) => Math.min(p.x, p.y))))),
    hi = Math.ceil(Math.log10(Math.max(...all.map((p) => Math.max(p.x, p.y)))));
  const size = H - T - B;
  const px = (v: number): number => L + ((Math.log10(v) - lo) / (hi - lo)) * size;
  const py = (v: number): number => T + (1 - (Math.log10(v) - lo) / (hi - lo)) * size;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${
      L + size + R
    }" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${L + size + R}" height="${H}" fill="white"/>`,
    `<text x="${L + size / 2}" y="22" text-anchor="middle" font-size="14">${esc(title)}</text>`,
    `<line x1="${L}" y1="${T + size}" x2="${L + size}" y2="${T + size}" stroke="black"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${T + size}" stroke="black"/>`,
  ];
  for (let p = lo; p <= hi; p++) {
    const v = 10 ** p;
    const label = v >= 1 ? `${v} s` : v >= 1e-3 ? `${v * 1e3} ms` : `${v * 1e6} µs`;
    out.push(`<text x="${px(v)}" y="${T + size + 16}" text-anchor="middle">${label}</text>`);
    out.push(`<text x="${L - 6}" y="${py(v) + 4}" text-anchor="end">${label}</text>`);
    out.push(`<line x1="${px(v)}" y1="${T}" x2="${px(v)}" y2="${T + size}" stroke="#eee"/>`);
    out.push(`<line x1="${L}" y1="${py(v)}" x2="${L + size}" y2="${py(v)}" stroke="#eee"/>`);
  }
  const a = 10 ** lo, b = 10 ** hi;
  out.push(`<line x1="${px(a)}" y1="${py(a)}" x2="${px(b)}" y2="${py(b)}" stroke="black"/>`);
  for (const f of [0.8, 1.2]) {
    out.push(
      `<line x1="${px(a)}" y1="${py(a * f)}" x2="${px(b / f)}" y2="${
        py(b)
      }" stroke="#999" stroke-dasharray="4 3"/>`,
    );
  }
  out.push(`<text x="${L + size / 2}" y="${H - 12}" text-anchor="middle">measured</text>`);
  out.push(
    `<text x="16" y="${T + size / 2}" text-anchor="middle" transform="rotate(-90 16 ${
      T + size / 2
    })">predicted</text>`,
  );
  points.forEach((s, i) => {
    const c = COLORS[i % COLORS.length];
    for (const p of s.points) {
      if (p.x > 0 && p.y > 0) {
        out.push(`<circle cx="${px(p.x)}" cy="${py(p.y)}" r="3" fill="${c}" fill-opacity="0.7"/>`);
      }
    }
    out.push(`<rect x="${L + size + 12}" y="${T + i * 18}" width="10" height="10" fill="${c}"/>`);
    out.push(`<text x="${L + size + 28}" y="${T + i * 18 + 9}">${esc(s.name)}</text>`);
  });
  out.push(`<text x="${L + size + 12}" y="${T + points.length * 18 + 14}">dashed: ±20%</text>`);
  out.push("</svg>");
  return out.join("\n") + "\n";
}

/**
 * A stacked bar chart of step-time shares (compute and communication), one bar per case.
 *
 * @param title The title.
 * @param bars Each bar: its label, the compute and the communication seconds.
 * @returns The SVG document.
 */
export function shareChart(
  title: string,
  bars: readonly { label: string; compute: number; comm: number }[],
): string {
  const w = 820, rowH = 26, top = 40, left = 300, right = 90;
  const h = top + bars.length * rowH + 40;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif" font-size="12">`,
    `<rect width="${w}" height="${h}" fill="white"/>`,
    `<text x="${w / 2}" y="22" text-anchor="middle" font-size="14">${esc(title)}</text>`,
  ];
  bars.forEach((b, i) => {
    const y = top + i * rowH, total = b.compute + b.comm, span = w - left - right;
    const share = b.comm / total;
    out.push(`<text x="${left - 8}" y="${y + 15}" text-anchor="end">${esc(b.label)}</text>`);
    out.push(`<rect x="${left}" y="${y + 3}" width="${span * (1 - share)}" height="18" fill="#9ecae1"/>`);
    out.push(
      `<rect x="${left + span * (1 - share)}" y="${y + 3}" width="${
        span * share
      }" height="18" fill="#fd8d3c"/>`,
    );
    out.push(`<text x="${w - right + 6}" y="${y + 15}">${(share * 100).toFixed(0)}% comm</text>`);
  });
  const y = top + bars.length * rowH + 14;
  out.push(
    `<rect x="${left}" y="${y}" width="12" height="12" fill="#9ecae1"/><text x="${left + 18}" y="${
      y + 10
    }">compute</text>`,
  );
  out.push(
    `<rect x="${left + 100}" y="${y}" width="12" height="12" fill="#fd8d3c"/><text x="${left + 118}" y="${
      y + 10
    }">communication (not overlapped)</text>`,
  );
  out.push("</svg>");
  return out.join("\n") + "\n";
}

/** One slice of a timeline chart: a lane, a start and an end (ms), a kind (its colour) and a label. */
export interface Slice {
  /** The lane's label (`rank 0`). */
  lane: string;
  /** Start, ms from the chart's origin. */
  start: number;
  /** End, ms. */
  end: number;
  /** Its kind, e.g. `allReduce` or `queued`: one colour per kind, in the legend. */
  kind: string;
  /** Drawn in the lower part of the lane, over its call (a phase inside a call). */
  inner?: boolean;
}

/**
 * A timeline (Gantt) chart: one lane per rank, each slice a box coloured by its kind.
 *
 * @param title The title.
 * @param slices The slices.
 * @returns The SVG document.
 */
export function timelineChart(title: string, slices: readonly Slice[]): string {
  const lanes = [...new Set(slices.map((s) => s.lane))];
  const kinds = [...new Set(slices.map((s) => s.kind))].sort();
  const t0 = Math.min(...slices.map((s) => s.start)), t1 = Math.max(...slices.map((s) => s.end));
  const laneH = 28, h = T + lanes.length * laneH + B;
  const px = (t: number): number => L + ((t - t0) / (t1 - t0 || 1)) * (W - L - R);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${h}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${h}" fill="white"/>`,
    `<text x="${W / 2 - R / 2}" y="22" text-anchor="middle" font-size="14">${esc(title)}</text>`,
    `<line x1="${L}" y1="${h - B}" x2="${W - R}" y2="${h - B}" stroke="black"/>`,
  ];
  const span = t1 - t0, step = 10 ** Math.floor(Math.log10(span / 2 || 1));
  for (let t = 0; t <= span + 1e-9; t += step * (span / step > 10 ? 2 : 1)) {
    out.push(`<line x1="${px(t0 + t)}" y1="${T}" x2="${px(t0 + t)}" y2="${h - B + 4}" stroke="#eee"/>`);
    out.push(`<text x="${px(t0 + t)}" y="${h - B + 16}" text-anchor="middle">${+t.toPrecision(3)}</text>`);
  }
  out.push(`<text x="${(L + W - R) / 2}" y="${h - 12}" text-anchor="middle">time (ms)</text>`);
  lanes.forEach((lane, i) => {
    out.push(`<text x="${L - 6}" y="${T + i * laneH + laneH / 2 + 4}" text-anchor="end">${esc(lane)}</text>`);
  });
  for (const s of slices) {
    const i = lanes.indexOf(s.lane), c = COLORS[kinds.indexOf(s.kind) % COLORS.length];
    const x = px(s.start), w = Math.max(0.5, px(s.end) - x);
    const y = T + i * laneH + (s.inner ? laneH / 2 : 4), height = s.inner ? laneH / 2 - 4 : laneH - 8;
    out.push(`<rect x="${x.toFixed(2)}" y="${y}" width="${w.toFixed(2)}" height="${height}" fill="${c}"/>`);
  }
  kinds.forEach((k, i) => {
    const c = COLORS[i % COLORS.length];
    out.push(`<rect x="${W - R + 12}" y="${T + i * 18 - 4}" width="12" height="10" fill="${c}"/>`);
    out.push(`<text x="${W - R + 30}" y="${T + i * 18 + 5}">${esc(k)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n") + "\n";
}

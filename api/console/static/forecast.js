// The capacity forecast: commands due per hour against what the cap can run, and the hosts
// that would miss the promise if nothing changes (GET …/forecast).
import { P, get } from "./api.js";
import { fill, h, notice, table, when } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 960;
const HEIGHT = 240;
const AXIS = 40;

function svg(tag, attrs, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) element.setAttribute(key, String(value));
  element.append(...children);
  return element;
}

/** One bar per hour (due; the part still waiting at the hour's end darker) and the capacity
 *  the cap gives at the p50 scan duration as a line. */
function chart(hourly) {
  const top = Math.max(1, ...hourly.map((hour) => Math.max(hour.due, hour.backlog, hour.capacity)));
  const step = (WIDTH - AXIS) / hourly.length;
  const y = (value) => HEIGHT - 20 - ((HEIGHT - 30) * value) / top;
  const bars = hourly.flatMap((hour, index) => {
    const x = AXIS + index * step;
    const title = `${hour.start}: ${hour.due} due, ${hour.started} started, ${hour.backlog} `
      + `waiting at the end, capacity ${hour.capacity}`;
    return [
      svg("rect", { class: "due", x, y: y(hour.due), width: Math.max(1, step - 2),
        height: y(0) - y(hour.due) }, svg("title", {}, title)),
      svg("rect", { class: "backlog", x, y: y(hour.backlog), width: Math.max(1, step - 2),
        height: y(0) - y(hour.backlog) }),
    ];
  });
  const capacity = hourly.map((hour, index) =>
    `${AXIS + index * step},${y(hour.capacity)} ${AXIS + (index + 1) * step},${y(hour.capacity)}`);
  return svg("svg", { id: "forecast-chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img" },
    svg("title", {}, "Commands due per hour against capacity"),
    svg("text", { x: 0, y: 12, class: "axis" }, String(top)),
    svg("text", { x: 0, y: HEIGHT - 20, class: "axis" }, "0"),
    svg("line", { x1: AXIS, x2: WIDTH, y1: y(0), y2: y(0), class: "axis" }),
    ...bars,
    svg("polyline", { points: capacity.join(" "), class: "capacity" }),
    svg("text", { x: AXIS, y: HEIGHT - 4, class: "axis" }, "now"),
    svg("text", { x: WIDTH - 60, y: HEIGHT - 4, class: "axis" }, `+${hourly.length} h`));
}

export async function forecastView({ main, params }) {
  const hours = Number(params.get("hours")) || 48;
  const forecast = await get(`${P}/forecast?hours=${hours}`);
  const headline = forecast.promise_kept
    ? notice(`The cap keeps the ${forecast.promise_hours} h promise over the next ${hours} h.`)
    : notice(`${forecast.misses.length} host(s) would be scanned later than the `
      + `${forecast.promise_hours} h promise if nothing changes.`, true);
  fill(main,
    h("h1", {}, "Forecast"),
    h("div", { id: "forecast-headline" }, headline),
    h("p", { className: "muted" },
      `${forecast.max_concurrent_scans} scans at once, a scan taking ${forecast.scan_seconds_p50} s `
      + `(p50; p90 ${forecast.scan_seconds_p90} s) from ${forecast.measured_scans} results. `
      + "Bars: commands due per hour (darker: still waiting at the hour's end); "
      + "line: what the cap runs in an hour."),
    chart(forecast.hourly),
    h("h2", {}, "Hosts that would miss the promise"),
    table(["host", "deadline", "forecast start"], forecast.misses.map((miss) => [
      h("a", { href: `#/hosts/${encodeURIComponent(miss.host_id)}` }, miss.host_id),
      when(miss.deadline), miss.starts_at ? when(miss.starts_at) : "not within the horizon"]),
      "None."));
}

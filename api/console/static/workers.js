// The workers: the worker group as Kafka's coordinator sees it, refreshed while shown.
import { P, get } from "./api.js";
import { fill, h, notice, table, when } from "./dom.js";

export const WORKERS_REFRESH_MS = 2000;

function card(label, value) {
  return h("div", { className: "card" },
    h("div", { className: "value" }, value), h("div", { className: "label" }, label));
}

const short = (memberId) => (memberId ? memberId.slice(0, 24) : "—");

async function render(main) {
  const group = await get(`${P}/workers`);
  const partitions = group.members.flatMap((member) => member.partitions)
    .concat(group.unassigned)
    .sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  fill(main,
    h("h1", {}, "Workers"),
    group.dispatch_owner ? null
      : notice("No worker owns the dispatch queue: nothing is issued until one does.", true),
    h("div", { className: "cards", id: "worker-cards" },
      card("workers", group.members.length),
      card("group state", group.state),
      card("lag (records)", group.lag),
      card("unassigned partitions", group.unassigned.length)),
    h("h2", {}, "Members"),
    table(["member", "client", "host", "version", "partitions", "lag", "dispatch queue"],
      group.members.map((member) => [
        h("code", { title: member.member_id }, short(member.member_id)), member.client_id,
        member.client_host, member.version || "—", member.partitions.length, member.lag,
        member.owns_dispatch ? h("strong", { className: "dispatch-owner" }, "owner") : ""]),
      "No worker is in the group."),
    h("h2", {}, "Partitions"),
    table(["topic", "partition", "owner", "committed", "end", "lag"],
      partitions.map((row) => [row.topic, row.partition,
        row.owner ? h("code", { title: row.owner }, short(row.owner))
          : h("span", { className: "bad" }, "unassigned"),
        row.committed ?? "—", row.end ?? "—", row.lag ?? "—"]),
      "The group reads no partition."),
    h("p", { className: "muted" }, `Group ${group.group_id}; asked the broker `,
      when(group.observed_at), `; refreshes every ${WORKERS_REFRESH_MS / 1000} s.`));
}

export async function workersView({ main }) {
  await render(main);
  const timer = setInterval(() => render(main).catch(() => {}), WORKERS_REFRESH_MS);
  return () => clearInterval(timer);
}

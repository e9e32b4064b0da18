// The gpufleet web console: reads the API with the bearer token it signed in with, and draws it.
// Read-only: it only ever sends GET requests. Everything is built with DOM calls and textContent,
// never from HTML strings, since names and messages come from users.
"use strict";

const TOKEN_KEY = "gpufleet-token";
const PAGES = ["fleet", "queues", "work", "events", "cost"];
const REFRESH_MS = 1500;
const MAX_EVENTS = 200;

const state = { token: sessionStorage.getItem(TOKEN_KEY), events: [], cursor: null, generation: 0 };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function number(value, digits) {
  if (value === null || value === undefined) return "-"; // a figure this world does not keep
  return Number.isInteger(value) ? String(value) : value.toFixed(digits === undefined ? 2 : digits);
}

function clock(time) {
  // The time of day, to the second; the full timestamp is the cell's tooltip.
  const match = /T(\d\d:\d\d:\d\d)/.exec(time || "");
  return match ? match[1] : time || "";
}

function showProblem(message) {
  const box = document.getElementById("problem");
  box.textContent = message || "";
  box.hidden = !message;
}

class SignedOut extends Error {}

async function api(path) {
  const answer = await fetch(path, { headers: { Authorization: "Bearer " + state.token } });
  if (answer.status === 401) throw new SignedOut("the token was not accepted");
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    throw new Error((body.error && body.error.message) || answer.status + " " + answer.statusText);
  }
  return answer.json();
}

function currentPage() {
  const page = location.hash.replace(/^#/, "");
  return PAGES.includes(page) ? page : "fleet";
}

function showPage() {
  const signedIn = Boolean(state.token);
  document.getElementById("signin").hidden = signedIn;
  document.getElementById("tabs").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  const page = currentPage();
  for (const section of document.querySelectorAll("section.page")) {
    section.hidden = !signedIn || section.id !== page;
  }
  for (const link of document.querySelectorAll("#tabs a")) {
    link.classList.toggle("current", link.dataset.page === page);
  }
}

function drawMap(map) {
  const box = document.getElementById("map");
  if (map === null) {
    box.replaceChildren(el("p", { text: "The fleet map is shown to the admin token; a queue's token sees its queue." }));
    return;
  }
  box.replaceChildren(...map.map((pool) => {
    const title = [pool.gpuModel, pool.capacityType, pool.sharing].filter(Boolean).join(", ");
    const racks = pool.racks.map((rack) => el("div", { class: "rack" },
      el("h4", { text: "rack " + rack.name }),
      ...rack.nodes.map((node) => {
        const down = node.phase !== "Ready";
        const row = el("div", { class: "node" + (down ? " down" : ""), "data-node": node.name, "data-phase": node.phase },
          el("span", { class: "name", text: node.name, title: node.phase + (node.cordoned ? ", cordoned" : "") }));
        for (const gpu of node.gpus) {
          const tip = ["GPU " + gpu.index + ": " + gpu.state, gpu.problem || "", gpu.holders.join(", ")];
          row.append(el("span", { class: "gpu " + gpu.state, "data-gpu": String(gpu.index),
            "data-state": gpu.state, title: tip.filter(Boolean).join("\n") }));
        }
        return row;
      })));
    return el("div", { class: "pool", "data-pool": pool.name },
      el("h3", { text: pool.name + (title ? " (" + title + ")" : "") }), el("div", { class: "racks" }, ...racks));
  }));
}

function quotaBar(flavor) {
  const limit = flavor.nominal + (flavor.borrowingLimit === null ? 0 : flavor.borrowingLimit);
  const share = limit > 0 ? Math.min(1, flavor.used / limit) : 0;
  const fill = el("span", { class: flavor.used > flavor.nominal ? "over" : "" });
  fill.style.width = (share * 100).toFixed(1) + "%";
  const borrow = flavor.borrowingLimit === null ? "" : " (+" + number(flavor.borrowingLimit) + " borrowable)";
  return el("div", { class: "flavor", title: "bar: use against nominal plus what may be borrowed" },
    el("span", { class: "bar" }, fill),
    " " + flavor.flavor + ": " + number(flavor.used) + " / " + number(flavor.nominal) + borrow);
}

function drawQueues(queues) {
  document.getElementById("queue-rows").replaceChildren(...queues.map((queue) => el("tr", { "data-queue": queue.name },
    el("td", { text: queue.name }),
    el("td", { text: queue.parent || "-" }),
    el("td", {}, ...(queue.flavors.length ? queue.flavors.map(quotaBar) : ["no quota"])),
    el("td", { class: "number", text: number(queue.fairShareWeight) }),
    el("td", { class: "number", text: (queue.dominantShare * 100).toFixed(1) + "%" }),
    el("td", { class: "number", text: String(queue.pending) }),
    el("td", { class: "number", text: String(queue.admitted) }))));
}

function drawWork(work) {
  document.getElementById("work-rows").replaceChildren(...work.map((item) => {
    const reason = item.pending
      ? el("pre", { class: "reason", text: ["Pending: " + item.pending.type, ...item.pending.lines].join("\n") })
      : "";
    return el("tr", { "data-work": item.namespace + "/" + item.name, "data-phase": item.phase },
      el("td", { text: item.kind }),
      el("td", { text: (item.namespace ? item.namespace + "/" : "") + item.name }),
      el("td", { text: item.queue }),
      el("td", { text: item.phase }),
      el("td", { class: "number", text: String(item.restarts) }),
      el("td", {}, reason));
  }));
}

function drawCost(cost) {
  document.getElementById("cost-pools").replaceChildren(...cost.pools.map((pool) => el("tr", { "data-pool": pool.name },
    el("td", { text: pool.name }),
    el("td", { class: "number", text: number(pool.pricePerGpuHour) }),
    el("td", { class: "number", text: String(pool.gpus) }),
    el("td", { class: "number", text: number(pool.allocatedGpus) }),
    el("td", { class: "number", text: number(pool.costPerHour) }),
    el("td", { class: "number", text: number(pool.idleGpuHours) }),
    el("td", { class: "number", text: number(pool.idleCost) }))));
  document.getElementById("cost-queues").replaceChildren(...cost.queues.map((queue) => el("tr", { "data-queue": queue.name },
    el("td", { text: queue.name }),
    el("td", { class: "number", text: number(queue.gpus) }),
    el("td", { class: "number", text: number(queue.costPerHour) }))));
  document.getElementById("cost-jobs").replaceChildren(...cost.jobs.map((job) => el("tr", { "data-job": job.namespace + "/" + job.name },
    el("td", { text: job.namespace + "/" + job.name }),
    el("td", { text: job.queue }),
    el("td", { text: job.state }),
    el("td", { text: job.pool || "" }),
    el("td", { class: "number", text: number(job.gpus) }),
    el("td", { class: "number", text: number(job.gpuHours) }),
    el("td", { class: "number", text: number(job.cost) }),
    el("td", { class: "number", text: number(job.lostGpuHours) }))));
  document.getElementById("cost-services").replaceChildren(...(cost.services || []).map((svc) => el("tr", { "data-service": svc.namespace + "/" + svc.name },
    el("td", { text: svc.namespace + "/" + svc.name }),
    el("td", { text: svc.queue }),
    el("td", { text: svc.state }),
    el("td", { text: svc.pool || "" }),
    el("td", { class: "number", text: number(svc.gpus) }),
    el("td", { class: "number", text: number(svc.gpuHours) }),
    el("td", { class: "number", text: number(svc.cost) }))));
}

function drawEvents() {
  document.getElementById("event-rows").replaceChildren(...state.events.map((event) => {
    const spec = event.spec || {};
    return el("tr", { class: spec.type === "Warning" ? "warning" : "" },
      el("td", { text: clock(spec.time), title: spec.time || "" }),
      el("td", { text: spec.type || "" }),
      el("td", { text: spec.reason || "" }),
      el("td", { text: String(spec.involvedKind || "").toLowerCase() + "/" + (spec.involvedName || "") }),
      el("td", { text: spec.message || "" }));
  }));
}

function signOut(message) {
  state.token = null;
  state.generation += 1; // the loops of the old token stop at their next turn
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById("who").textContent = "";
  showProblem(message);
  showPage();
}

function failed(error) {
  if (error instanceof SignedOut) signOut("Signed out: " + error.message + ".");
  else showProblem("Cannot reach the server: " + error.message + " (retrying)");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function refreshLoop(generation) {
  while (generation === state.generation) {
    try {
      const view = await api("/v1/console");
      if (generation !== state.generation) return;
      document.getElementById("who").textContent = view.who.admin ? "admin" : "queue " + view.who.queue;
      drawMap(view.map);
      drawQueues(view.queues);
      drawWork(view.work);
      drawCost(view.cost);
      showProblem("");
    } catch (error) {
      failed(error);
    }
    await sleep(REFRESH_MS);
  }
}

async function eventLoop(generation) {
  while (generation === state.generation) {
    const query = new URLSearchParams({ kind: "Event", limit: "100" });
    if (state.cursor !== null) {
      query.set("resourceVersion", state.cursor);
      query.set("timeoutSeconds", "20");
    }
    try {
      const page = await api("/v1/changes?" + query);
      if (generation !== state.generation) return;
      state.cursor = page.resourceVersion;
      const fresh = page.items.filter((change) => change.type !== "DELETED").map((change) => change.object);
      if (fresh.length) {
        const byName = new Map(state.events.map((event) => [event.metadata.namespace + "/" + event.metadata.name, event]));
        for (const event of fresh) byName.set(event.metadata.namespace + "/" + event.metadata.name, event);
        state.events = [...byName.values()]
          .sort((a, b) => String(b.spec.time).localeCompare(String(a.spec.time)))
          .slice(0, MAX_EVENTS);
        drawEvents();
      }
    } catch (error) {
      failed(error);
      await sleep(REFRESH_MS);
    }
  }
}

function start() {
  state.generation += 1;
  state.events = [];
  state.cursor = null;
  drawEvents();
  showPage();
  refreshLoop(state.generation);
  eventLoop(state.generation);
}

function tokenFromFragment() {
  // `#token=...` signs in from a link; the fragment never reaches the server, and is removed at once.
  const match = location.hash.match(/token=([^&]+)/);
  if (!match) return;
  state.token = decodeURIComponent(match[1]);
  sessionStorage.setItem(TOKEN_KEY, state.token);
  history.replaceState(null, "", location.pathname + "#fleet");
}

document.getElementById("signin-form").addEventListener("submit", (submitted) => {
  submitted.preventDefault();
  state.token = document.getElementById("token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, state.token);
  document.getElementById("token").value = "";
  showProblem("");
  start();
});
document.getElementById("signout").addEventListener("click", () => signOut(""));
window.addEventListener("hashchange", showPage);

tokenFromFragment();
if (state.token) start();
else showPage();

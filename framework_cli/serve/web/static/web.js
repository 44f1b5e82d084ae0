// Parts of a form that depend on other fields (the tools an agent's MCP servers and skills
// give, the event tools its events select, a provider's model ids) are fetched again when
// those fields change. Without this script the page still works: a save lists them anew.
"use strict";

const pending = new WeakMap();

async function refresh(part, form) {
  const data = new FormData(form);
  const params = new URLSearchParams();
  for (const name of part.dataset.refreshWith.split(" ")) {
    for (const value of data.getAll(name)) params.append(name, value);
  }
  for (const box of part.querySelectorAll("input[type=checkbox][name]")) params.append("shown", box.value);
  const ticket = {};
  pending.set(part, ticket);
  part.setAttribute("aria-busy", "true");
  try {
    const response = await fetch(part.dataset.refreshUrl + "?" + params.toString(), { credentials: "same-origin" });
    if (response.ok && pending.get(part) === ticket) part.innerHTML = await response.text();
  } finally {
    if (pending.get(part) === ticket) part.removeAttribute("aria-busy");
  }
}

document.addEventListener("change", (event) => {
  const form = event.target.form;
  if (!form || !event.target.name) return;
  for (const part of form.querySelectorAll("[data-refresh-url]")) {
    if (part.dataset.refreshOn.split(" ").includes(event.target.name)) refresh(part, form);
  }
});

// A page that asks for it (a session with a turn in flight, an active run) reloads itself every
// few seconds, except while something is being written in it: what is typed is never lost to a
// reload. A field whose blank is not empty says so (data-blank, e.g. "{}" for a tool's arguments).
const reload = document.querySelector('meta[name="fw-reload"]');
if (reload) {
  setInterval(() => {
    const writing = [...document.querySelectorAll("textarea, input[type=text]")].some((f) => f.value.trim() !== (f.dataset.blank ?? ""))
      || [...document.querySelectorAll("select")].some((s) => [...s.options].some((o) => o.selected !== o.defaultSelected));
    if (!writing && !document.querySelector("textarea:focus, input:focus, select:focus")) location.reload();
  }, 1000 * Number(reload.content || 3));
}

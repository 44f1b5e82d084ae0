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

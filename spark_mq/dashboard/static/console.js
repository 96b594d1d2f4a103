// The console's one script: forms marked data-confirm ask the operator first, and carry confirm=yes
// (the server refuses destructive actions without it). Pages work without scripts, except those actions.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.dataset.confirm;
  if (!question) return;
  if (!window.confirm(question)) {
    event.preventDefault();
    return;
  }
  form.querySelector("input[name=confirm]").value = "yes";
});

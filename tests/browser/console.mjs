// Opens the toolpilot console in headless Chromium: first without the admin token (it must
// say where to find it and show no approval), then at CONSOLE_URL (…/#admin=TOKEN, as the
// serve log prints it); approves the call that waits, waits for its run to finish, opens the
// run's timeline (followed over fetch, with the token in a header), and prints what it saw as
// JSON. Usage: node console.mjs CONSOLE_URL SCREENSHOT
import { chromium } from "playwright-core";

const [consoleUrl, screenshot] = process.argv.slice(2);
const base = consoleUrl.split("#")[0].replace(/\/$/, "");
const browser = await chromium.launch({
  executablePath: process.env.TOOLPILOT_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = { errors: [] };
try {
  // Without the token: the page says what to open, and nothing waiting is shown.
  const bare = await browser.newPage();
  await bare.goto(base + "/");
  const auth = bare.locator("#auth");
  await auth.waitFor({ state: "visible", timeout: 20000 });
  await bare.waitForTimeout(1500); // a few refreshes of the approvals list
  out.without_token = await auth.innerText();
  out.approvals_without_token = await bare.locator("#approvals li").count();
  await bare.close();

  const page = await browser.newPage();
  page.on("pageerror", (e) => out.errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") out.errors.push(m.text()); });
  await page.goto(consoleUrl);
  out.title = await page.title();
  out.auth_hidden = await page.locator("#auth").isHidden();

  const pending = page.locator("#approvals li").first();
  await pending.waitFor({ timeout: 20000 });
  out.approval = await pending.innerText();
  out.badge = await page.locator("#approvals-count").innerText();
  await pending.getByRole("button", { name: "Approve", exact: true }).click();
  await page.locator("#approvals li").first().waitFor({ state: "detached", timeout: 20000 });

  await page.waitForFunction(
    () => document.querySelector("#runs tbody tr .status")?.textContent === "done",
    null, { timeout: 20000 });
  out.row = await page.locator("#runs tbody tr").first().innerText();
  await page.locator("#runs tbody tr").first().click();
  await page.locator("#timeline li", { hasText: "done:" }).waitFor({ timeout: 20000 });
  out.timeline = await page.locator("#timeline").innerText();
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
} catch (e) {
  out.failure = String(e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));

// Opens the toolpilot console at BASE in headless Chromium, approves the call that waits,
// waits for its run to finish, opens the run's timeline, and prints what it saw as JSON.
// Usage: node console.mjs BASE SCREENSHOT
import { chromium } from "playwright-core";

const [base, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.TOOLPILOT_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = { errors: [] };
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => out.errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") out.errors.push(m.text()); });
  await page.goto(base + "/");
  out.title = await page.title();

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

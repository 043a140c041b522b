#!/usr/bin/env node
// `npx outlive …`: the platform package's binary, with this process's arguments and stdio.
import { spawn } from "node:child_process";
import { binaryPath } from "../index.js";

let bin;
try {
  bin = binaryPath();
} catch (e) {
  console.error(`outlive: ${e.message}`);
  process.exit(1);
}
const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => child.kill(sig));
child.on("error", (e) => {
  console.error(`outlive: could not start ${bin}: ${e.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => process.exit(code ?? 128 + (signal === "SIGKILL" ? 9 : 15)));

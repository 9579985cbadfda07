// An outside system reading a Cairn study with the official NATS JavaScript client, from
// nothing but a reader's startup kit (`cairn provision reader`), as docs/events.md says.
//
//   node reader.mjs KIT events --job JOB    the study's stream from the kit, then the job's
//                                           events in order: one JSON line each
//   node reader.mjs KIT try PROBES.json     each probe (publish, subscribe, consume, info,
//                                           list) tried: one JSON line each, saying whether
//                                           the broker allowed it
//
// Exit 0 when it ran (whatever the broker decided), 1 on any other failure.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import {
  AckPolicy,
  DeliverPolicy,
  connect,
  credsAuthenticator,
  nanos,
} from "nats";
import YAML from "yaml";

const REFUSAL_WAIT_MS = 10_000;

function out(record) {
  process.stdout.write(JSON.stringify(record) + "\n");
}

function jwtOf(creds) {
  // A .creds file holds the JWT between its first pair of ----- lines.
  const m = creds.match(/-{3,}[^\n]*JWT[^\n]*-{3,}\n([^\n]+)\n/);
  if (!m) throw new Error("no JWT in the credentials file");
  return m[1].trim();
}

function claimsOf(jwt) {
  return JSON.parse(Buffer.from(jwt.split(".")[1], "base64url").toString("utf8"));
}

// Every permission violation the server reports, by operation and subject.
const refusals = [];
const waiters = new Set();

async function watchStatus(nc) {
  for await (const s of nc.status()) {
    if (s.type === "error" && s.permissionContext) {
      refusals.push(s.permissionContext);
      for (const w of waiters) w();
    }
  }
}

function refusedNow(operation, subject) {
  return refusals.some((r) => r.operation === operation && r.subject === subject);
}

async function waitRefused(operation, subject, ms = REFUSAL_WAIT_MS) {
  // A refusal is asynchronous (it can arrive after a flush's answer): wait for it, bounded.
  const deadline = Date.now() + ms;
  while (!refusedNow(operation, subject)) {
    const left = deadline - Date.now();
    if (left <= 0) return false;
    await new Promise((resolve) => {
      const done = () => { waiters.delete(done); clearTimeout(timer); resolve(); };
      const timer = setTimeout(done, left);
      waiters.add(done);
    });
  }
  return true;
}

async function open(kitDir) {
  const kit = YAML.parse(readFileSync(join(kitDir, "kit.yaml"), "utf8"));
  const creds = readFileSync(join(kitDir, "reader.creds"), "utf8");
  const jwt = jwtOf(creds);
  const nc = await connect({
    servers: kit.nats_url,
    name: "js-reader",
    // TLS, verifying the server against the federation's CA.
    tls: { caFile: join(kitDir, "ca.pem") },
    // The .creds file: JWT + a signature of the server's nonce with the seed ...
    authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
    // ... and the JWT again as the CONNECT token: nats-server hands the token (not the
    // JWT) to the federation's authority.
    token: jwt,
    // Replies come only to _INBOX.<this credential's user key>.>
    inboxPrefix: `_INBOX.${claimsOf(jwt).sub}`,
    timeout: 10_000,
  });
  watchStatus(nc);
  // checkAPI: false, as $JS.API.INFO (account info) is not a reader's.
  const jsm = await nc.jetstreamManager({ checkAPI: false });
  return { kit, nc, jsm };
}

// A consumer under one of this identity's own names that is free: `create` fails on a name
// in use (another process of the same reader), and then the next one is tried.
async function createOwnConsumer(jsm, kit, stream, filter) {
  const description = `js-reader ${randomBytes(6).toString("hex")}`;
  let last;
  for (const name of kit.consumer_names) {
    try {
      return await jsm.consumers.add(stream, {
        name,
        description,
        filter_subject: filter,
        ack_policy: AckPolicy.None,
        deliver_policy: DeliverPolicy.All,
        inactive_threshold: nanos(30_000),
        mem_storage: true,
      });
    } catch (err) {
      last = err;
      if (!String(err.message).includes("already exists")) throw err;
    }
  }
  throw last;
}

async function events(kitDir, job) {
  const { kit, nc, jsm } = await open(kitDir);
  try {
    for (const s of kit.streams) {
      const info = await jsm.streams.info(s.name); // STREAM.INFO: allowed on the kit's streams
      out({ kind: "stream", name: s.name, subjects: info.config.subjects,
            messages: info.state.messages });
    }
    const stream = `STUDY_${kit.study}`;
    const filter = `cairn.study.${kit.study}.job.${job}.>`;
    const ci = await createOwnConsumer(jsm, kit, stream, filter);
    out({ kind: "consumer", stream, name: ci.name, pending: ci.num_pending });
    const consumer = await nc.jetstream().consumers.get(stream, ci.name);
    let pending = ci.num_pending;
    while (pending > 0) {
      const batch = await consumer.fetch({ max_messages: Math.min(pending, 256),
                                           expires: 5_000 });
      let got = 0;
      for await (const m of batch) {
        got += 1;
        pending = m.info.pending;
        const event = m.json();
        out({ kind: "event", seq: m.seq, subject: m.subject, type: event.type,
              job: event.job, id: event.id,
              content_type: m.headers?.get("Content-Type") ?? null });
      }
      if (got === 0) throw new Error(`no messages though ${pending} were pending`);
    }
    await jsm.consumers.delete(stream, ci.name);
  } finally {
    await nc.close();
  }
}

async function tryOne(nc, jsm, kit, probe) {
  const result = { kind: "probe", ...probe };
  try {
    switch (probe.op) {
      case "publish": {
        nc.publish(probe.subject, new TextEncoder().encode(JSON.stringify(probe.body ?? {})));
        await nc.flush();
        result.allowed = !(await waitRefused("publish", probe.subject));
        break;
      }
      case "subscribe": {
        const sub = nc.subscribe(probe.subject);
        await nc.flush();
        result.allowed = !(await waitRefused("subscription", probe.subject));
        sub.unsubscribe();
        break;
      }
      case "consume": {
        const name = probe.name ?? kit.consumer_names[0];
        await jsm.consumers.add(probe.stream, {
          name, filter_subject: probe.filter, ack_policy: AckPolicy.None,
          inactive_threshold: nanos(30_000), mem_storage: true,
          description: `js-reader probe ${randomBytes(6).toString("hex")}`,
        });
        result.allowed = true;
        await jsm.consumers.delete(probe.stream, name);
        break;
      }
      case "info": {
        await jsm.streams.info(probe.stream);
        result.allowed = true;
        break;
      }
      case "list": {
        const names = [];
        for await (const n of jsm.streams.names()) names.push(n);
        result.allowed = true;
        result.names = names;
        break;
      }
      default:
        throw new Error(`unknown probe ${probe.op}`);
    }
  } catch (err) {
    // A request the broker refuses fails with the violation (nats.js matches it to the
    // request); anything else is an answer from JetStream, not a refusal.
    result.allowed = false;
    result.refused = err.code === "PERMISSIONS_VIOLATION" ||
      String(err.message).toLowerCase().includes("permissions violation");
    result.error = String(err.message);
    return result;
  }
  result.refused = !result.allowed;
  return result;
}

async function tryAll(kitDir, probesFile) {
  const probes = JSON.parse(readFileSync(probesFile, "utf8"));
  const { kit, nc, jsm } = await open(kitDir);
  try {
    for (const probe of probes) out(await tryOne(nc, jsm, kit, probe));
  } finally {
    await nc.close();
  }
}

const [kitDir, command, ...rest] = process.argv.slice(2);
try {
  if (command === "events" && rest[0] === "--job" && rest[1]) {
    await events(kitDir, rest[1]);
  } else if (command === "try" && rest[0]) {
    await tryAll(kitDir, rest[0]);
  } else {
    process.stderr.write("usage: node reader.mjs KIT events --job JOB | KIT try PROBES.json\n");
    process.exit(2);
  }
} catch (err) {
  process.stderr.write(`reader: ${err.message}\n`);
  process.exit(1);
}

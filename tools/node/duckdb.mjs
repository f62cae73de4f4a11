// Runs SQL statements in DuckDB (in-process) and prints, as one JSON object,
// the rows of the last statement and the bytes this process read while
// running each statement (rchar from /proc/self/io).
//
//   node duckdb.mjs [--threads N] [--memory-limit 4GB] SQL [SQL ...]
import { DuckDBInstance } from '@duckdb/node-api';
import { readFileSync } from 'node:fs';

function rchar() {
  try {
    const m = readFileSync('/proc/self/io', 'utf8').match(/^rchar: (\d+)$/m);
    return m ? Number(m[1]) : 0;
  } catch { return 0; }
}

const args = process.argv.slice(2);
const opts = {};
const sqls = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--threads') opts.threads = args[++i];
  else if (args[i] === '--memory-limit') opts.memory_limit = args[++i];
  else sqls.push(args[i]);
}
const inst = await DuckDBInstance.create(':memory:', opts);
const conn = await inst.connect();
let rows = [];
const reads = [];
const seconds = [];
for (const sql of sqls) {
  const before = rchar();
  const t0 = process.hrtime.bigint();
  const reader = await conn.runAndReadAll(sql);
  seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
  reads.push(rchar() - before);
  rows = reader.getRowObjectsJson();
}
process.stdout.write(JSON.stringify({ rows, read_bytes: reads, seconds }) + '\n');

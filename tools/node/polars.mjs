// The Polars peer for relayout's benchmarks (nodejs-polars, Rust): sorts a
// Parquet table by the given keys and writes it as one zstd Parquet file,
// the job `relayout run --slice-keys` does. Prints the rows written as JSON.
//
//   node polars.mjs INPUT_GLOB OUTPUT KEY[,KEY...]
//
// POLARS_MAX_THREADS sets its thread pool (the benchmark leaves it at the
// machine's cores, as DuckDB's --threads does).
import pl from 'nodejs-polars';

const [input, output, keys] = process.argv.slice(2);
if (!input || !output || !keys) {
  process.stderr.write('usage: node polars.mjs INPUT_GLOB OUTPUT KEY[,KEY...]\n');
  process.exit(2);
}
const df = await pl.scanParquet(input).sort(keys.split(",")).collect();
df.writeParquet(output, { compression: 'zstd' });
process.stdout.write(JSON.stringify({ rows: df.height }) + '\n');

/*
 * Elastic's mock OTLP server (@elastic/mockotlpserver), run for flatgate's
 * tests through its module API (tests/otlp.py starts this).
 *
 * Its CLI cannot: it always listens on the fixed OTLP ports (HTTP 4318,
 * gRPC 4317), so two test runs at once would collide. Here it serves
 * OTLP/HTTP alone (no gRPC, no UI) on a port the kernel picks, on 127.0.0.1.
 *
 *   node receiver.cjs <install dir> <traces file>
 *
 * Each trace export request it receives is appended to <traces file> as one
 * line of JSON: the package's own normalization (jsonStringifyTrace: ids in
 * hex, kinds and status codes by enum name, 64-bit integers as strings),
 * attributes left as OTLP KeyValue lists of AnyValue. Once listening, it
 * prints one line to stdout: {"listening": "<OTLP/HTTP base URL>"}.
 */

'use strict';

const fs = require('fs');
const path = require('path');

const [installDir, tracesFile] = process.argv.slice(2);
const pkg = path.join(installDir, 'node_modules', '@elastic', 'mockotlpserver');
const {MockOtlpServer} = require(pkg);
const {jsonStringifyTrace} = require(path.join(pkg, 'lib', 'normalize.js'));

async function main() {
    const server = new MockOtlpServer({
        logLevel: 'warn',
        services: ['http'],
        httpHostname: '127.0.0.1',
        httpPort: 0,
        onTrace: (trace) => {
            // One write per request: a reader never sees half a line but the last.
            fs.appendFileSync(tracesFile, jsonStringifyTrace(trace, {}) + '\n');
        },
    });
    await server.start();
    process.on('SIGTERM', () => {
        server.close().finally(() => process.exit(0));
    });
    const url = server.httpUrl.href.replace(/\/$/, '');
    process.stdout.write(JSON.stringify({listening: url}) + '\n');
}

main().catch((err) => {
    process.stderr.write(`mockotlpserver did not start: ${err.stack || err}\n`);
    process.exit(1);
});

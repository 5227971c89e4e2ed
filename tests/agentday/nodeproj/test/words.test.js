'use strict';

const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { spawnSync, execFile, fork } = require('node:child_process');
const { countWords } = require('../lib/words');

test('counts words', () => {
  assert.strictEqual(countWords(' one two  three '), 3);
});

test('spawnSync runs node', () => {
  const r = spawnSync(process.execPath, ['-e', 'console.log(6 * 7)'], { encoding: 'utf8' });
  assert.strictEqual(r.status, 0, r.stderr);
  assert.strictEqual(r.stdout, '42\n');
});

test('execFile runs a shell', async () => {
  const out = await new Promise((resolve, reject) => {
    execFile('/bin/sh', ['-c', 'echo from sh; pwd >/dev/null'], (err, stdout) => {
      if (err) reject(err);
      else resolve(stdout);
    });
  });
  assert.strictEqual(out, 'from sh\n');
});

test('fork talks over IPC', async () => {
  const child = fork(path.join(__dirname, '..', 'lib', 'worker.js'));
  const reply = await new Promise((resolve, reject) => {
    child.on('message', resolve);
    child.on('error', reject);
    child.send('the forked child counts these words');
  });
  assert.deepStrictEqual(reply, { words: 6, pid: 'number' });
  const code = await new Promise((resolve) => child.on('exit', resolve));
  assert.strictEqual(code, 0);
});

'use strict';

// A forked child: answers each message over the IPC channel, then exits.
const { countWords } = require('./words');

process.on('message', (text) => {
  process.send({ words: countWords(text), pid: typeof process.pid });
  process.disconnect();
});

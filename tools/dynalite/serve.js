// dynalite (Apache-2.0, LevelDB in memory) on 127.0.0.1:PORT, printing "listening PORT" once it
// accepts connections. Its CLI cannot take port 0 (`argv.port || 4567`); this can, and it never
// binds anything but loopback. make tools installs the pinned module into .tools/dynalite.
//
//   node tools/dynalite/serve.js [PORT]
'use strict';
const path = require('path');
const modules = process.env.DYNALITE_MODULES || path.join(__dirname, '..', '..', '.tools', 'dynalite', 'node_modules');
const dynalite = require(path.join(modules, 'dynalite'));
const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}

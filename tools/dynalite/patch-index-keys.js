// Makes dynalite's index entries unique per item (run by `make tools` after `npm ci`).
//
// dynalite 4.0.0 keys an item's entry in a secondary index by the index's key followed by the
// first 6 hex digits (24 bits) of an MD5 of the item's table key (db/index.js, createIndexKey;
// its own comment: "Can use the whole hash if we deem it important - for now just first six
// chars"). Two items with the same index key whose table keys share those 24 bits get the
// same entry: the second write replaces the first in the index, and a query of the index never
// returns the first item again. In punctual's renewals table every renewal of a minute shares
// its due index key (a shard of 16 and the due instant), so a 10,000-renewal `punctual run`
// has about a one in six chance of such a pair (1.7 % at 3,000): on 2026-12-04 one renewal was never released
// (lost 1, and reconcile counted 9,999 due). Real DynamoDB has no such limit.
//
// The patch appends the item's whole table key to the entry's key, after the 6 digits, so the
// order of entries is unchanged and each item has its own. It refuses to run against a
// dynalite whose code is not the one it knows. tools/dynalite/test_index_keys.py proves it.
'use strict';
const fs = require('fs');
const path = require('path');

const file = path.join(process.argv[2] || path.join(__dirname, '..', '..', '.tools', 'dynalite', 'node_modules', 'dynalite'), 'db', 'index.js');
const before = '  return createKey(item, table, keySchema) + hashPrefix.apply(this, tableKeyPieces)\n';
const after = "  return createKey(item, table, keySchema) + hashPrefix.apply(this, tableKeyPieces) + '/' + createKey(item, table)\n";
const text = fs.readFileSync(file, 'utf8');
if (text.includes(after)) {
  process.stdout.write(`dynalite index keys: already patched (${file})\n`);
} else if (text.split(before).length === 2) {
  fs.writeFileSync(file, text.replace(before, after));
  process.stdout.write(`dynalite index keys: patched (${file})\n`);
} else {
  process.stderr.write(`dynalite index keys: ${file} does not have the line this patch replaces; is it dynalite 4.0.0?\n`);
  process.exit(1);
}

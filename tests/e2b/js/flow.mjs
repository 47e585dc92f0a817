// E2B's usual flow through its own JavaScript SDK (run by tests/e2b/test_sdk_js.py with
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set to a live Sandhub): exits non-zero on any
// difference.
import { Sandbox } from 'e2b'
const sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { from: 'js' } })
const seen = []
const r = await sbx.commands.run('echo hi; echo err >&2', { onStdout: (d) => seen.push(d) })
if (r.stdout !== 'hi\n' || r.stderr !== 'err\n' || seen.join('') !== 'hi\n') throw new Error('run: ' + JSON.stringify(r))
const bg = await sbx.commands.run('sleep 1; echo done', { background: true })
const done = await bg.wait()
if (done.stdout !== 'done\n') throw new Error('bg: ' + JSON.stringify(done))
await sbx.files.write('js/hello.txt', 'from js\n')
const text = await sbx.files.read('js/hello.txt')
if (text !== 'from js\n') throw new Error('read: ' + text)
const names = (await sbx.files.list('js')).map((e) => e.name)
if (names.join() !== 'hello.txt') throw new Error('list: ' + names)
const listed = await Sandbox.list({ query: { metadata: { from: 'js' } } }).nextItems()
if (!listed.some((s) => s.sandboxId === sbx.sandboxId)) throw new Error('list sandboxes')
const killer = await sbx.commands.run('sleep 600', { background: true })
if (!(await sbx.commands.kill(killer.pid))) throw new Error('kill')
await sbx.kill()
console.log('JS SDK flow ok', sbx.sandboxId)

// Quota admin through the gateway with @platformatic/kafka's Admin client.
// usage: node quota_admin.mjs '<json spec>'
//   spec: {bootstrap: "host:port", sasl: {username, password} | null,
//          steps: [{alter: [entries], validateOnly?: bool} | {describe: [components], strict?: bool}]}
// prints one JSON line: {results: [{ok: entries} | {error: [{id, code, message}]} per step]}
import './node20.mjs'
import { Admin } from '@platformatic/kafka'

const spec = JSON.parse(process.argv[2])

function protocolErrors (error) {
  // MultipleErrors -> ResponseError -> ProtocolError(apiId, apiCode, serverErrorMessage): report the leaves
  const out = []
  const walk = e => {
    if (e === null || e === undefined) return
    if (e.errors?.length) {
      for (const inner of e.errors) walk(inner)
      return
    }
    out.push({ id: e.apiId ?? e.code ?? 'UNKNOWN', code: e.apiCode ?? null, message: e.serverErrorMessage ?? String(e.message) })
  }
  walk(error)
  return out
}

const admin = new Admin({
  clientId: 'quotaflow-node-test',
  bootstrapBrokers: [spec.bootstrap],
  retries: 0,
  ...(spec.sasl ? { sasl: { mechanism: 'PLAIN', username: spec.sasl.username, password: spec.sasl.password } } : {})
})

const results = []
try {
  for (const step of spec.steps) {
    try {
      if (step.alter) {
        results.push({ ok: await admin.alterClientQuotas({ entries: step.alter, validateOnly: step.validateOnly ?? false }) })
      } else {
        results.push({ ok: await admin.describeClientQuotas({ components: step.describe, strict: step.strict ?? false }) })
      }
    } catch (error) {
      results.push({ error: protocolErrors(error) })
    }
  }
} finally {
  await admin.close()
}
process.stdout.write(JSON.stringify({ results }) + '\n')

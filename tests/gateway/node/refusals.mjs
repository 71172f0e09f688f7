// The gateway's refusals seen by @platformatic/kafka (a client no one here wrote): each step prints the Kafka error
// codes the client reported (or "ok"), so the test can check it parsed Kafka's refusal and nothing else.
// usage: node refusals.mjs '<json spec>'
//   spec: {bootstrap: "host:port", username, password, topic, okGroup, deniedGroup, seconds}
// prints one JSON line: {produce: [codes], fetch: [codes], join: [codes], createTopics: [codes],
//                        deleteTopics: [codes], describeConfigs: [codes], describeScram: [codes]}
import './node20.mjs'
import { Admin, Connection, Consumer, MessagesStreamModes, Producer, describeUserScramCredentialsV0 } from '@platformatic/kafka'

const spec = JSON.parse(process.argv[2])
const sasl = { mechanism: 'PLAIN', username: spec.username, password: spec.password }
const common = { clientId: 'refusals-node', bootstrapBrokers: [spec.bootstrap], sasl, retries: 0 }

function codes (error, out = []) {
  if (error == null) return out
  if (typeof error.apiCode === 'number') out.push(error.apiCode)
  for (const inner of error.errors ?? []) codes(inner, out)
  if (error.cause) codes(error.cause, out)
  return out
}

async function step (run) {
  try {
    await run()
    return 'ok'
  } catch (error) {
    const found = [...new Set(codes(error))].sort((a, b) => a - b)
    return found.length ? found : `${error.code ?? ''}: ${error.message}`
  }
}

async function consume (groupId) {
  const consumer = new Consumer({ ...common, groupId, sessionTimeout: 6000, heartbeatInterval: 1000 })
  try {
    const stream = await consumer.consume({ topics: [spec.topic], mode: MessagesStreamModes.EARLIEST,
      autocommit: false, maxWaitTime: 200 })
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, spec.seconds * 1000)
      stream.on('error', error => { clearTimeout(timer); reject(error) })
      stream.on('data', () => {})
    })
    await stream.close()
  } finally {
    await consumer.close(true)
  }
}

const result = {}
result.produce = await step(async () => {
  const producer = new Producer({ ...common })
  try {
    await producer.send({ messages: [{ topic: spec.topic, value: Buffer.from('x'), partition: 0 }] })
  } finally {
    await producer.close()
  }
})
result.fetch = await step(() => consume(spec.okGroup))
result.join = await step(() => consume(spec.deniedGroup))
const admin = new Admin({ ...common })
try {
  result.createTopics = await step(() => admin.createTopics({ topics: [spec.topic + '-node-new'], partitions: 1,
    replicas: 1 }))
  result.deleteTopics = await step(() => admin.deleteTopics({ topics: [spec.topic] }))
  result.describeConfigs = await step(() => admin.describeConfigs({ resources: [{ resourceType: 2,
    resourceName: spec.topic }] }))
} finally {
  await admin.close()
}
result.describeScram = await step(async () => {
  const [host, port] = spec.bootstrap.split(':')
  const connection = new Connection('refusals-node', { sasl })
  try {
    await connection.connect(host, Number(port))
    await describeUserScramCredentialsV0.api.async(connection, [{ name: 'admin' }])
  } finally {
    await connection.close()
  }
})
process.stdout.write(JSON.stringify(result) + '\n')

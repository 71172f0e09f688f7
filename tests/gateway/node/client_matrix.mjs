// One client of the gateway's client-matrix test: @platformatic/kafka over SASL_SSL.
// usage: node client_matrix.mjs '<json spec>'
//   spec: {bootstrap: "host:port", ca: "ca.pem", sasl: {mechanism, username, password}, clientId, groupId, topic,
//          sessionTimeout: ms (the group member's; 10000 if absent),
//          mode: "roundtrip", count: N}   produce N messages, read them back through the consumer group
//        | {..., mode: "consume", seconds: S}   read the topic from the earliest offset through the group for S s
// prints one JSON line: {values: [...]} (roundtrip) or {bytes: B, messages: M} (consume)
import './node20.mjs'
import { readFileSync } from 'node:fs'
import { Consumer, MessagesStreamModes, Producer, stringDeserializers, stringSerializers } from '@platformatic/kafka'

const spec = JSON.parse(process.argv[2])
const common = {
  clientId: spec.clientId,
  bootstrapBrokers: [spec.bootstrap],
  tls: { ca: readFileSync(spec.ca) },
  sasl: spec.sasl
}

async function consume (limit, deadlineMs, keep) {
  const consumer = new Consumer({ ...common, groupId: spec.groupId, deserializers: stringDeserializers,
    sessionTimeout: spec.sessionTimeout ?? 10000, heartbeatInterval: 500 })
  const stream = await consumer.consume({ topics: [spec.topic], mode: MessagesStreamModes.EARLIEST,
    autocommit: true, maxWaitTime: 500 })
  const got = { values: [], bytes: 0, messages: 0 }
  // the consume phase is timed from the first message (tansu answers a JoinGroup after ~half the session timeout);
  // 90 s at most
  let timer = setTimeout(() => stream.close(), keep ? deadlineMs : 90000)
  try {
    for await (const message of stream) {
      if (got.messages === 0 && !keep) {
        clearTimeout(timer)
        timer = setTimeout(() => stream.close(), deadlineMs)
      }
      got.messages += 1
      got.bytes += Buffer.byteLength(message.value ?? '')
      if (keep) got.values.push(message.value)
      if (got.messages >= limit) break
    }
  } finally {
    clearTimeout(timer)
    await consumer.close(true)
  }
  return got
}

if (spec.mode === 'roundtrip') {
  const producer = new Producer({ ...common, serializers: stringSerializers })
  const sent = Array.from({ length: spec.count }, (_, i) => `node-${i}`)
  try {
    await producer.send({ messages: sent.map(value => ({ topic: spec.topic, value, partition: 0 })) })
  } finally {
    await producer.close()
  }
  const got = await consume(spec.count, 60000, true)
  process.stdout.write(JSON.stringify({ values: got.values }) + '\n')
} else {
  const got = await consume(Infinity, spec.seconds * 1000, false)
  process.stdout.write(JSON.stringify({ bytes: got.bytes, messages: got.messages }) + '\n')
}

// @platformatic/kafka 2.x calls Promise.withResolvers (Node >= 22); the machine has Node 20. Imported first by the
// test scripts.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}

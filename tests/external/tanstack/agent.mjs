// A real TanStack AI agent for Countersign's end-to-end tests: @tanstack/ai's
// chat() served over AG-UI SSE with node:http, no LLM, no network.
//
//   node tests/external/tanstack/agent.mjs [port]     (0 or none: any free port)
//
// prints `ready on http://127.0.0.1:PORT` once listening; SIGTERM stops it.
// The model is a fake text adapter that answers from what the run knows (the
// resolutions its middleware read); the interrupts are TanStack's own generic
// interrupts (defineInterrupt + onInterruptBoundary), so every binding,
// schema hash and resume check is the package's. The server keeps nothing
// between runs (but which threads the refusing paths refused once): a resume
// is accepted only if its entries carry the `tanstack:interruptContinuation`
// TanStack rebuilds the request from, as an ephemeral chat() server requires.
//
// Paths (see tests/external/README.md):
//   /review/       one interrupt `review-refund` (payload, response schema)
//   /pair/         two interrupts in one batch: `confirm-email`, `confirm-invoice`
//   /refuse-once/  as /review/, but the model fails the first resume of each
//                  thread: RUN_STARTED, then RUN_ERROR `peer-refused`
//   /refuse-early/ as /review/, but the first resume of each thread is refused
//                  before it starts, as TanStack refuses a resume it cannot
//                  match: a lone RUN_ERROR `peer-refused`
//                  (later resumes of a thread are accepted on both)
//   POST /_continuation/  {interrupts: [...]} -> {continuations: [... or null]}:
//                  TanStack's own genericInterruptContinuationFromDescriptor
//                  (what its client puts on each resume entry), for comparison
//   GET <path>health      {"status":"ok","agent":{"name":...}}
import http from 'node:http'
import {
  chat,
  chatParamsFromRequestBody,
  defineInterrupt,
  genericInterruptContinuationFromDescriptor,
  toServerSentEventsResponse,
} from '@tanstack/ai'

const HOST = '127.0.0.1'
const MAX_BODY = 1024 * 1024

// A Standard Schema with a JSON Schema export, written out so the peer needs
// no schema library: TanStack hashes the exported JSON Schema into the
// binding and validates answers with `validate`.
function objectSchema(properties, required) {
  const json = { type: 'object', properties, required, additionalProperties: false }
  const issues = (value) => {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      return [{ message: 'Expected an object.' }]
    }
    const found = []
    for (const name of required) {
      if (!(name in value)) found.push({ message: `Missing ${name}.`, path: [name] })
    }
    for (const [name, spec] of Object.entries(value)) {
      const expected = properties[name]?.type
      if (!expected) found.push({ message: `Unexpected ${name}.`, path: [name] })
      else if (typeof spec !== (expected === 'integer' ? 'number' : expected)) {
        found.push({ message: `${name} must be ${expected}.`, path: [name] })
      }
    }
    return found
  }
  return {
    '~standard': {
      version: 1,
      vendor: 'countersign-peer',
      validate(value) {
        const found = issues(value)
        return found.length ? { issues: found } : { value }
      },
      jsonSchema: { input: () => json, output: () => json },
    },
  }
}

const approval = objectSchema(
  { approved: { type: 'boolean' }, note: { type: 'string' } },
  ['approved'],
)
const reviewRefund = defineInterrupt({
  id: 'review-refund',
  payloadSchema: objectSchema(
    { order: { type: 'string' }, amount: { type: 'integer' }, currency: { type: 'string' } },
    ['order', 'amount', 'currency'],
  ),
  responseSchema: approval,
})
const confirmEmail = defineInterrupt({ id: 'confirm-email', responseSchema: approval })
const confirmInvoice = defineInterrupt({ id: 'confirm-invoice', responseSchema: approval })
const INTERRUPTS = [reviewRefund, confirmEmail, confirmInvoice]

function review() {
  return [
    reviewRefund.interrupt({
      key: 'refund-A-1001',
      reason: 'review-required',
      message: 'Refund 42 EUR on order A-1001?',
      payload: { order: 'A-1001', amount: 42, currency: 'EUR' },
    }),
  ]
}

function pair() {
  return [
    confirmEmail.interrupt({
      key: 'email-a',
      reason: 'confirmation',
      message: 'Send the summary email to a@example.com?',
    }),
    confirmInvoice.interrupt({
      key: 'invoice-7',
      reason: 'confirmation',
      message: 'Issue invoice INV-7 for 120 EUR?',
    }),
  ]
}

const SCENARIOS = {
  '/review/': { name: 'review', raise: review },
  '/pair/': { name: 'pair', raise: pair },
  '/refuse-once/': { name: 'refuse-once', raise: review, refuse: 'model' },
  '/refuse-early/': { name: 'refuse-early', raise: review, refuse: 'resolution' },
}
// `<path> <threadId>` of each thread whose first resume was refused already.
const refused = new Set()

// Whether this resume is the first of its thread on a refusing path (and so is refused).
function refusing(scenario, params) {
  const seen = `${scenario.name} ${params.threadId}`
  if (!scenario.refuse || refused.has(seen)) return false
  refused.add(seen)
  return true
}

function refusal() {
  return Object.assign(new Error('The peer refuses the first resume of every thread.'), { code: 'peer-refused' })
}

// `how each interrupt was answered`, in batch order: the model's whole reply.
function verdicts(resolutions) {
  return resolutions
    .map((r) => {
      const id = r.request.definition.id
      if (r.status === 'cancelled') return `${id}=cancelled`
      const note = r.response.note ? ` (${r.response.note})` : ''
      return `${id}=${r.response.approved ? 'approved' : 'rejected'}${note}`
    })
    .join(', ')
}

// The fake model: one text message saying what it was told.
function fakeAdapter(reply, fail = false) {
  return {
    kind: 'text',
    name: 'countersign-fake',
    model: 'fake-1',
    '~types': {},
    async *chatStream(options) {
      const messageId = `msg_${options.runId ?? 'run'}`
      const text = reply()
      // Provider adapters open the run themselves; chat() forwards one RUN_STARTED.
      yield { type: 'RUN_STARTED', runId: options.runId, threadId: options.threadId, timestamp: Date.now() }
      if (fail) throw refusal()
      yield { type: 'TEXT_MESSAGE_START', messageId, role: 'assistant', timestamp: Date.now() }
      yield { type: 'TEXT_MESSAGE_CONTENT', messageId, delta: text, timestamp: Date.now() }
      yield { type: 'TEXT_MESSAGE_END', messageId, timestamp: Date.now() }
      yield {
        type: 'RUN_FINISHED',
        runId: options.runId,
        threadId: options.threadId,
        finishReason: 'stop',
        timestamp: Date.now(),
      }
    },
    async structuredOutput() {
      throw new Error('countersign-fake has no structured output')
    },
  }
}

function run(scenario, params) {
  const resuming = (params.resume?.length ?? 0) > 0
  const refuse = resuming && refusing(scenario, params) ? scenario.refuse : null
  let answered = []
  const middleware = {
    name: `countersign-${scenario.name}`,
    // A fresh run pauses before the model; a resume never raises again.
    onInterruptBoundary(ctx) {
      if (resuming || ctx.phase !== 'beforeModel') return
      return { interrupts: scenario.raise() }
    },
    onInterruptResolution(_ctx, resolutions) {
      if (refuse === 'resolution') throw refusal()
      answered = resolutions.all()
    },
  }
  return chat({
    adapter: fakeAdapter(() => (resuming ? `Resumed: ${verdicts(answered)}.` : 'Nothing to review.'),
      refuse === 'model'),
    messages: params.messages,
    threadId: params.threadId,
    runId: params.runId,
    parentRunId: params.parentRunId,
    resume: params.resume,
    state: params.state,
    interrupts: INTERRUPTS,
    middleware: [middleware],
  })
}

async function readBody(req) {
  const chunks = []
  let size = 0
  for await (const chunk of req) {
    size += chunk.length
    if (size > MAX_BODY) throw Object.assign(new Error('body too large'), { status: 413 })
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}

function sendJson(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(value))
}

async function pipe(response, res) {
  res.writeHead(response.status, Object.fromEntries(response.headers))
  const reader = response.body.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    res.write(value)
  }
  res.end()
}

async function handle(req, res) {
  const path = req.url.split('?')[0]
  if (req.method === 'GET' && path.endsWith('/health')) {
    const scenario = SCENARIOS[path.slice(0, -'health'.length)]
    if (scenario) return sendJson(res, 200, { status: 'ok', agent: { name: scenario.name } })
  }
  if (req.method !== 'POST') return sendJson(res, 405, { detail: 'POST a RunAgentInput' })
  let body
  try {
    body = JSON.parse(await readBody(req))
  } catch (error) {
    return sendJson(res, error.status ?? 400, { detail: error.message })
  }
  if (path === '/_continuation/') {
    const continuations = (body.interrupts ?? []).map(
      (interrupt) => genericInterruptContinuationFromDescriptor(interrupt) ?? null,
    )
    return sendJson(res, 200, { continuations })
  }
  const scenario = SCENARIOS[path]
  if (!scenario) return sendJson(res, 404, { detail: `no agent at ${path}` })
  let params
  try {
    params = await chatParamsFromRequestBody(body)
  } catch (error) {
    return sendJson(res, 400, { detail: error.message })
  }
  const abortController = new AbortController()
  res.on('close', () => abortController.abort())
  await pipe(toServerSentEventsResponse(run(scenario, params), { abortController }), res)
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error(error)
    if (!res.headersSent) sendJson(res, 500, { detail: String(error) })
    else res.end()
  })
})

const port = Number(process.argv[2] ?? 0)
server.listen(port, HOST, () => {
  console.log(`ready on http://${HOST}:${server.address().port}`)
})
process.on('SIGTERM', () => {
  server.close(() => process.exit(0))
  server.closeAllConnections?.()
})

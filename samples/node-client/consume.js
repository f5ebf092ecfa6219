// consume.js reads the integration events kumiko apps publish, from a
// queue of this service's own bound to the contracts it wants, and prints
// each as a JSON line. It acknowledges a message after it printed it, so
// one it did not finish is delivered again.
//
//   RABBITMQ_URL  the broker (default amqp://guest:guest@127.0.0.1:5672/)
//   EXCHANGE      the apps' exchange (default kumiko.events)
//   QUEUE         this service's queue (default node-client)
//   TYPES         comma-separated contracts (default order.shipped)
//   COUNT         stop after this many messages (default: run until killed)
'use strict';

const amqp = require('amqplib');

const url = process.env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672/';
const exchange = process.env.EXCHANGE || 'kumiko.events';
const queue = process.env.QUEUE || 'node-client';
const types = (process.env.TYPES || 'order.shipped').split(',');
const count = Number(process.env.COUNT || 0);

async function main() {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  // The exchange as kumiko declares it: durable, direct, routed by contract.
  await ch.assertExchange(exchange, 'direct', { durable: true });
  await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  for (const type of types) {
    await ch.bindQueue(queue, exchange, type);
  }
  await ch.prefetch(16);
  // Tell whoever started us that the queue is bound: messages published
  // from now on reach it.
  process.stderr.write('ready\n');

  let seen = 0;
  await ch.consume(queue, (msg) => {
    if (msg === null) return; // the broker cancelled the consumer
    const h = msg.properties.headers || {};
    const line = {
      id: msg.properties.messageId,
      type: msg.properties.type || msg.fields.routingKey,
      version: Number(h['kumiko-event-version'] ?? 1),
      tenant: String(h['kumiko-tenant']),
      user: h['kumiko-user'] === undefined ? '' : String(h['kumiko-user']),
      key: h['kumiko-key'] === undefined ? '' : String(h['kumiko-key']),
      correlationId: msg.properties.correlationId || '',
      payload: JSON.parse(msg.content.toString('utf8')),
    };
    process.stdout.write(JSON.stringify(line) + '\n');
    ch.ack(msg);
    seen++;
    if (count > 0 && seen === count) {
      conn.close().then(() => process.exit(0));
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

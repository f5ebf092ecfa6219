// publish.js sends one contract message to the kumiko apps that handle it,
// in kumiko's wire format (docs/integration-events.md#wire-format), and
// waits for the broker's confirm.
//
//   RABBITMQ_URL  the broker (default amqp://guest:guest@127.0.0.1:5672/)
//   EXCHANGE      the apps' exchange (default kumiko.events)
//   TYPE          the contract, the routing key (default order.shipped)
//   TENANT        the tenant's UUID the handlers run in (required)
//   ID            the message id: a UUID or any string that is the same
//                 every time this message is sent (default: a new UUID)
//   VERSION       the contract version; VERSION_AS=number (default) sends
//                 it as a number (amqplib encodes small ones as a byte),
//                 string as a string, none leaves the header out (= 1)
//   KEY           the ordering key, for handlers that ask for order
//   BODY          the JSON payload (default {"orderId":"node-1"})
'use strict';

const crypto = require('node:crypto');
const amqp = require('amqplib');

const url = process.env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672/';
const exchange = process.env.EXCHANGE || 'kumiko.events';
const type = process.env.TYPE || 'order.shipped';
const tenant = process.env.TENANT;
const id = process.env.ID || crypto.randomUUID();
const body = process.env.BODY || '{"orderId":"node-1"}';

function headers() {
  const h = { 'kumiko-tenant': tenant };
  const version = process.env.VERSION || '1';
  switch (process.env.VERSION_AS || 'number') {
    case 'number':
      h['kumiko-event-version'] = Number(version);
      break;
    case 'string':
      h['kumiko-event-version'] = version;
      break;
    case 'none':
      break;
    default:
      throw new Error(`VERSION_AS is number, string or none, not ${process.env.VERSION_AS}`);
  }
  if (process.env.KEY) h['kumiko-key'] = process.env.KEY;
  return h;
}

async function main() {
  if (!tenant) throw new Error('TENANT (the tenant UUID) is required');
  JSON.parse(body); // refuse to send what is no JSON
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  await ch.assertExchange(exchange, 'direct', { durable: true });
  ch.publish(exchange, type, Buffer.from(body), {
    persistent: true,
    contentType: 'application/json',
    messageId: id,
    type,
    timestamp: Math.floor(Date.now() / 1000),
    headers: headers(),
  });
  await ch.waitForConfirms();
  await conn.close();
  process.stdout.write(id + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

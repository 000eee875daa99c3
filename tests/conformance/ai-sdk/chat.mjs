// The AI SDK's own client code against threadstream's `/api/chat` (tests/blackbox/ai_sdk.rs).
//
//   node chat.mjs send    BASE CHAT_ID TEXT  DefaultChatTransport.sendMessages (POST /api/chat)
//   node chat.mjs resume  BASE CHAT_ID       DefaultChatTransport.reconnectToStream (GET …/stream)
//   node chat.mjs stop    BASE CHAT_ID TEXT  sendMessages, then abort after 5 chunks, as useChat's
//                                            stop() does (the request's AbortSignal)
//   node chat.mjs approve BASE CHAT_ID TEXT  sendMessages; the message pauses on a tool approval;
//                                            approve it as Chat.addToolApprovalResponse does and
//                                            send the messages again, continuing the message
//   node chat.mjs answer  BASE CHAT_ID TEXT  sendMessages; the message pauses on a data-confirmation
//                                            (questions); put ANSWER (env, JSON) in its
//                                            data.answer, as a page's setMessages would, and
//                                            send the messages again (sendMessage() with none)
//   node chat.mjs regenerate BASE CHAT_ID TEXT  sendMessages; then what Chat.regenerate() posts
//                                            (the assistant message dropped, no messageId); a
//                                            second message on the same chat id; then
//                                            Chat.regenerate({messageId}) of the regenerated one
//
// Prints one JSON line: {resumed, stopped, chunks, invalid, message} (approve: also `first`, the
// paused message's; answer: also `first`; regenerate: {first, regenerated, next, again}, each such an object). Every chunk is checked against the SDK's own `uiMessageChunkSchema`
// (invalid ones are listed), and `readUIMessageStream` builds the assistant message from the
// same chunks, as `useChat` does.
import { DefaultChatTransport, readUIMessageStream, uiMessageChunkSchema } from 'ai';
import { safeValidateTypes } from '@ai-sdk/provider-utils';

const [mode, base, chatId, text] = process.argv.slice(2);
const transport = new DefaultChatTransport({ api: `${base}/api/chat` });
const abort = new AbortController();
const user = { id: 'u1', role: 'user', parts: [{ type: 'text', text }] };

// Reads a response stream: its chunks (each checked) and the message built from them,
// continuing `message` when given.
async function read(stream, message) {
  const [forChunks, forMessage] = stream.tee();
  const chunks = [];
  const invalid = [];
  const collecting = (async () => {
    const reader = forChunks.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const checked = await safeValidateTypes({ value, schema: uiMessageChunkSchema });
      if (!checked.success) invalid.push({ value, error: String(checked.error) });
      chunks.push(value);
      if (mode === 'stop' && chunks.length === 5) abort.abort();
    }
  })().catch(e => { if (mode !== 'stop') throw e; });
  let built = message;
  try {
    for await (const m of readUIMessageStream({ stream: forMessage, message })) built = m;
  } catch (e) {
    if (mode !== 'stop') throw e;
  }
  await collecting;
  return { chunks, invalid, message: built };
}

const send = (messages, messageId, trigger = 'submit-message') =>
  transport.sendMessages({ chatId, trigger, messageId, messages, abortSignal: abort.signal });

if (mode === 'resume') {
  const stream = await transport.reconnectToStream({ chatId });
  if (stream === null) {
    console.log(JSON.stringify({ resumed: false }));
  } else {
    console.log(JSON.stringify({ resumed: true, ...(await read(stream)) }));
  }
} else if (mode === 'approve') {
  const first = await read(await send([user], undefined));
  const message = structuredClone(first.message);
  const part = message.parts.find(p => p.state === 'approval-requested');
  if (!part) {
    console.log(JSON.stringify({ first, approvalAsked: false }));
    process.exit(0);
  }
  // What Chat.addToolApprovalResponse({ id, approved: true }) does to the part.
  part.state = 'approval-responded';
  part.approval = { ...part.approval, approved: true };
  const second = await read(await send([user, message], message.id), structuredClone(message));
  console.log(JSON.stringify({ approvalAsked: true, first, ...second }));
} else if (mode === 'answer') {
  const first = await read(await send([user], undefined));
  const message = structuredClone(first.message);
  const part = message.parts.find(p => p.type === 'data-confirmation' && !p.data.answer);
  if (!part) {
    console.log(JSON.stringify({ first, asked: false }));
    process.exit(0);
  }
  part.data = { ...part.data, answer: JSON.parse(process.env.ANSWER) };
  const second = await read(await send([user, message], message.id), structuredClone(message));
  console.log(JSON.stringify({ asked: true, first, ...second }));
} else if (mode === 'regenerate') {
  const first = await read(await send([user], undefined));
  // Chat.regenerate(): the last assistant message is dropped, and no messageId is sent.
  const regenerated = await read(await send([user], undefined, 'regenerate-message'));
  const user2 = { id: 'u2', role: 'user', parts: [{ type: 'text', text: 'And then?' }] };
  const next = await read(await send([user, regenerated.message, user2], undefined));
  // Chat.regenerate({ messageId }) of the regenerated answer: the messages before it, its id.
  const again = await read(await send([user], regenerated.message.id, 'regenerate-message'));
  console.log(JSON.stringify({ first, regenerated, next, again }));
} else {
  const out = await read(await send([user], undefined));
  console.log(JSON.stringify({ resumed: false, stopped: abort.signal.aborted, ...out }));
}

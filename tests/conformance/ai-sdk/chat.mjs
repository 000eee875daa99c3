// The AI SDK's own client code against threadstream's `/api/chat` (tests/blackbox/ai_sdk.rs).
//
//   node chat.mjs send   BASE CHAT_ID TEXT   DefaultChatTransport.sendMessages (POST /api/chat)
//   node chat.mjs resume BASE CHAT_ID        DefaultChatTransport.reconnectToStream (GET …/stream)
//
// Prints one JSON line: {resumed, chunks, invalid, message}. Every chunk is checked against the
// SDK's own `uiMessageChunkSchema` (invalid ones are listed), and `readUIMessageStream` builds
// the assistant message from the same chunks, as `useChat` does.
import { DefaultChatTransport, readUIMessageStream, uiMessageChunkSchema } from 'ai';
import { safeValidateTypes } from '@ai-sdk/provider-utils';

const [mode, base, chatId, text] = process.argv.slice(2);
const transport = new DefaultChatTransport({ api: `${base}/api/chat` });
let stream;
if (mode === 'send') {
  stream = await transport.sendMessages({
    chatId,
    trigger: 'submit-message',
    messageId: undefined,
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text }] }],
    abortSignal: undefined,
  });
} else {
  stream = await transport.reconnectToStream({ chatId });
  if (stream === null) {
    console.log(JSON.stringify({ resumed: false }));
    process.exit(0);
  }
}
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
  }
})();
let message;
for await (const m of readUIMessageStream({ stream: forMessage })) message = m;
await collecting;
console.log(JSON.stringify({ resumed: mode !== 'send', chunks, invalid, message }));

// The page that renders docs/integrations.md's snippet (app/chat.tsx, copied there by
// tests/blackbox/nextjs_chat.rs) for the thread named by `?thread=`.
import Chat from './chat';

export default async function Page({ searchParams }: { searchParams: Promise<{ thread?: string }> }) {
  const { thread } = await searchParams;
  return <Chat threadId={thread ?? 'nextjs-chat'} />;
}

// The test fixture's Next.js config (not part of docs/integrations.md's page): threadstream is
// reached same-origin, `/api/chat` and `/api/chat/<id>/stream` rewritten to THREADSTREAM_URL.
// Rewrites are fixed at build time, so the test builds with the server's address.
const threadstream = process.env.THREADSTREAM_URL;
if (!threadstream) throw new Error('THREADSTREAM_URL is not set');

export default {
  async rewrites() {
    return [
      { source: '/api/chat', destination: `${threadstream}/api/chat` },
      { source: '/api/chat/:path*', destination: `${threadstream}/api/chat/:path*` },
    ];
  },
};

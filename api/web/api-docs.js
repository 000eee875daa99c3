// The API reference page (/api-docs): Scalar renders /openapi.json, served by this same binary.
// No CDN, no fonts from elsewhere, no Scalar services: the page's CSP allows only this origin.
Scalar.createApiReference('#api-reference', {
  url: '/openapi.json',
  withDefaultFonts: false,
  hideClientButton: false,
  showDeveloperTools: 'never',
  telemetry: false,
  agent: { disabled: true },
  mcp: { disabled: true },
  hideDarkModeToggle: false,
  documentDownloadType: 'json',
  defaultOpenAllTags: true,
  servers: [{ url: window.location.origin, description: 'this server' }],
});

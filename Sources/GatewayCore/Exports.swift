// The contract's vocabulary: a plugin that imports GatewayCore can name HTTP methods, statuses
// and header fields, and log, without importing those modules itself. Everything else a plugin
// uses (SQLKit for its tables, NIOCore for byte buffers) it imports where it uses it.
@_exported import HTTPTypes
@_exported import Logging

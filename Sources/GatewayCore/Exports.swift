// The contract's own vocabulary: a plugin that imports GatewayCore can name HTTP methods and
// headers, SQL builders, byte buffers and loggers without importing each module itself.
@_exported import HTTPTypes
@_exported import Logging
@_exported import NIOCore
@_exported import SQLKit

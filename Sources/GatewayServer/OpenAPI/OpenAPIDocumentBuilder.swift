import Foundation
import GatewayCore
import HTTPTypes
import NIOCore
import OpenAPIKit

/// What the OpenAPI document needs to know about one mounted plugin.
public struct PluginDescription: Sendable {
    /// The plugin's id; it names the plugin's tag.
    public var id: String
    /// One line about the plugin; it describes the tag.
    public var summary: String
    /// Where the plugin's operations are mounted, such as `/v1/notes`.
    public var mount: String
    /// The plugin's native operations.
    public var operations: [GatewayCore.Route]
    /// The plugin's named schemas (``ServicePlugin/schemas``), put in the document's components.
    public var schemas: [String: JSONValue]
    /// Path items the plugin documents itself (``ServicePlugin/documentedPaths``).
    public var documentedPaths: [String: JSONValue]

    public init(id: String, summary: String, mount: String, operations: [GatewayCore.Route], schemas: [String: JSONValue] = [:],
                documentedPaths: [String: JSONValue] = [:]) {
        self.id = id
        self.summary = summary
        self.mount = mount
        self.operations = operations
        self.schemas = schemas
        self.documentedPaths = documentedPaths
    }
}

/// Builds the gateway's OpenAPI 3.1 document from the operations of the mounted plugins.
///
/// The document is derived, never written by hand, so it cannot drift from what the gateway serves.
/// It guarantees:
/// - every operation appears once, at its mount plus its path, with its name as `operationId` and
///   its plugin's id as its tag;
/// - its parameters, request body and success reply are described from the operation's declared
///   types (see ``SchemaReflector``);
/// - every failure it can produce is documented as an RFC 9457 problem
///   (`#/components/schemas/Problem`), with 400/422 for operations that take input, 401/403 for
///   operations that are not public, 429 always, and a `default` for the rest;
/// - operations that are not public require the `bearer` or the `apiKey` security scheme;
/// - the gateway's own endpoints (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`, `/v1/plugins`)
///   are listed under the `gateway` tag;
/// - the result passes OpenAPIKit's validation.
///
/// The `x-gateway-access`, `x-gateway-cache` and `x-gateway-cost` extensions on each operation
/// carry the gateway's policies for tools and people reading the document.
public enum OpenAPIDocumentBuilder {
    /// The document for `plugins`, served from `serverURL` (omitted: relative to the document).
    public static func document(title: String, version: String, serverURL: String?, plugins: [PluginDescription]) -> OpenAPI.Document {
        var paths: OrderedDictionary<OpenAPI.Path, OpenAPI.PathItem> = [:]
        var tags = [
            OpenAPI.Tag(name: gatewayTag, description: "The gateway's own endpoints: health, metrics, this document, the plugin list.")
        ]

        for (path, method, operation) in gatewayEndpoints {
            add(operation, method: method, at: path, to: &paths)
        }
        var named: OrderedDictionary<OpenAPI.ComponentKey, JSONSchema> = [:]
        for plugin in plugins {
            for (name, schema) in plugin.schemas.sorted(by: { $0.key < $1.key }) {
                guard let key = OpenAPI.ComponentKey(rawValue: name) else { continue }
                named[key] = documented(schema)
            }
        }
        for plugin in plugins {
            tags.append(OpenAPI.Tag(name: plugin.id, description: plugin.summary))
            // Path items the plugin documents itself (an upstream service's own document); those
            // that do not decode as OpenAPI 3.1 (a 3.0 document's `nullable`, say) are left out.
            var documented: [String: OpenAPI.PathItem] = [:]
            let decoder = JSONDecoder()
            for (path, item) in plugin.documentedPaths {
                if let decoded = try? decoder.decode(OpenAPI.PathItem.self, from: Data(item.serialized().readableBytesView)) {
                    documented[joined(mount: plugin.mount, path: path)] = decoded
                }
            }
            for operation in plugin.operations {
                // A route taking the rest of the path (`{path...}`) is one parameter to OpenAPI,
                // or, where the plugin documents its paths itself, described by those instead.
                if operation.path.hasSuffix("...}") && !documented.isEmpty { continue }
                let path = joined(mount: plugin.mount, path: operation.path).replacingOccurrences(of: "...}", with: "}")
                guard let method = OpenAPI.HttpMethod(rawValue: operation.method.rawValue) else { continue }
                var described = describe(operation, tag: plugin.id)
                // A documented description of the same call wins, under the gateway's name and policies.
                if let given = documented[path]?[method] {
                    var merged = given
                    merged.operationId = described.operationId
                    merged.tags = described.tags
                    merged.security = described.security
                    merged.vendorExtensions = described.vendorExtensions
                    for (status, response) in described.responses where merged.responses[status] == nil { merged.responses[status] = response }
                    described = merged
                    documented[path]?[method] = nil
                }
                add(described, method: method, at: OpenAPI.Path(rawValue: path), to: &paths)
            }
            for (path, decoded) in documented.sorted(by: { $0.key < $1.key }) {
                let at = OpenAPI.Path(rawValue: path)
                var item = paths[at] ?? OpenAPI.PathItem()
                for endpoint in decoded.endpoints where item[endpoint.method] == nil { item[endpoint.method] = endpoint.operation }
                if item.parameters.isEmpty { item.parameters = decoded.parameters }
                if !item.endpoints.isEmpty { paths[at] = item }
            }
        }

        return OpenAPI.Document(
            openAPIVersion: .v3_1_1,
            info: OpenAPI.Document.Info(title: title, version: version),
            servers: serverURL.flatMap(URLTemplate.init(rawValue:)).map { [OpenAPI.Server(urlTemplate: $0)] } ?? [],
            paths: paths.mapValues { .b($0) },
            components: components(adding: named),
            tags: tags
        )
    }

    /// The document as pretty-printed JSON with sorted keys, so that equal documents give equal bytes.
    public static func json(_ document: OpenAPI.Document) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(document)
    }

    /// `mount` followed by `path`, with exactly one slash between them; an empty or `/` path is the
    /// mount itself.
    static func joined(mount: String, path: String) -> String {
        Gateway.joinPath(mount, path)
    }

    // MARK: Operations

    private static let gatewayTag = "gateway"

    private static func add(
        _ operation: OpenAPI.Operation, method: OpenAPI.HttpMethod, at path: OpenAPI.Path,
        to paths: inout OrderedDictionary<OpenAPI.Path, OpenAPI.PathItem>
    ) {
        var item = paths[path] ?? OpenAPI.PathItem()
        // OpenAPI has room for one operation per method and path; should two plugins claim the
        // same one, the first declared keeps it rather than being silently replaced.
        guard item[method] == nil else { return }
        item[method] = operation
        paths[path] = item
    }

    private static func describe(_ operation: GatewayCore.Route, tag: String) -> OpenAPI.Operation {
        let io = operation.io
        let hasInput = io.path != NoInput.self || io.query != NoInput.self || io.hasBody || !operation.pathParameterNames.isEmpty

        var responses: OpenAPI.Response.Map = [:]
        responses[.status(code: successStatus(of: operation))] = .b(successResponse(of: operation))
        if hasInput {
            responses[.status(code: 400)] = problemReference(ProblemResponse.badRequest)
            responses[.status(code: 422)] = problemReference(ProblemResponse.invalidInput)
        }
        if operation.access != .public {
            responses[.status(code: 401)] = problemReference(ProblemResponse.unauthorized)
            responses[.status(code: 403)] = problemReference(ProblemResponse.forbidden)
        }
        responses[.status(code: 429)] = problemReference(ProblemResponse.tooManyRequests)
        responses[.default] = problemReference(ProblemResponse.problem)
        for (code, mediaType) in operation.errorMediaTypes.sorted(by: { $0.key < $1.key }) {
            guard let contentType = OpenAPI.ContentType(rawValue: mediaType) else { continue }
            responses[.status(code: code)] = .b(OpenAPI.Response(description: reasonPhrase(for: code), content: .direct([contentType: OpenAPI.Content(schema: .string)])))
        }

        return OpenAPI.Operation(
            tags: [tag],
            summary: operation.summary,
            description: operation.details,
            operationId: operation.name,
            parameters: parameters(of: operation),
            requestBody: requestBody(of: operation),
            responses: responses,
            security: security(for: operation.access),
            vendorExtensions: [
                "x-gateway-access": AnyCodable(operation.access.summary),
                "x-gateway-cache": operation.cache.ttl.map { AnyCodable(seconds(of: $0)) } ?? AnyCodable("none"),
                "x-gateway-cost": AnyCodable(operation.cost),
            ]
        )
    }

    private static func parameters(of operation: GatewayCore.Route) -> OpenAPI.Parameter.Array {
        var result: OpenAPI.Parameter.Array = []
        // The template decides which path parameters exist; a declared field the template lacks could
        // never be sent, and a template name without a field still arrives, as text.
        let pathFields = SchemaReflector.parameters(of: operation.io.path)
        for name in operation.pathParameterNames {
            var schema = pathFields.first { $0.name == name }?.schema ?? .string
            if let rule = operation.inputRules["path.\(name)"] { schema = schema.adding(rule.keywords) }
            result.append(.b(.path(name: name, schema: schema)))
        }
        for field in SchemaReflector.parameters(of: operation.io.query) {
            var schema = field.schema
            if let rule = operation.inputRules["query.\(field.name)"] { schema = schema.adding(rule.keywords) }
            result.append(.b(.query(name: field.name, required: field.required, schema: schema)))
        }
        return result
    }

    private static func requestBody(of operation: GatewayCore.Route) -> OpenAPI.Request? {
        guard operation.io.hasBody else { return nil }
        let isRaw = operation.io.body is any RawBodyInput.Type
        // A documented shape describes the JSON the operation reads; other media types (CSV) keep theirs.
        let memberRules = operation.inputRules.compactMap { key, rule -> (String, JSONValue)? in
            key.hasPrefix("body.") ? (String(key.dropFirst(5)), .object(rule.keywords)) : nil
        }
        func withMemberRules(_ schema: JSONSchema) -> JSONSchema {
            var schema = schema
            if let whole = operation.inputRules["body"] { schema = schema.adding(whole.keywords) }
            return memberRules.isEmpty ? schema : schema.adding(["properties": .object(Dictionary(uniqueKeysWithValues: memberRules))])
        }
        let documentedJSON = (operation.documentedBody.map(documented)
            ?? operation.io.bodyShape.map { SchemaReflector.schema(for: $0) }).map(withMemberRules)
        let schema = isRaw ? nil : withMemberRules(SchemaReflector.schema(for: operation.io.body))
        var content: OrderedDictionary<OpenAPI.ContentType, OpenAPI.Content> = [:]
        for mediaType in operation.bodyMediaTypes {
            guard let contentType = OpenAPI.ContentType(rawValue: mediaType) else { continue }
            // A documented shape is of JSON, or of the fields of a form.
            let isStructured = mediaType == "application/json" || mediaType.hasSuffix("+json") || mediaType == "application/x-www-form-urlencoded"
            content[contentType] = OpenAPI.Content(schema: (isStructured ? documentedJSON : nil) ?? schema ?? rawSchema(for: mediaType))
        }
        return OpenAPI.Request(content: .direct(content), required: true)
    }

    /// The schema of a body taken as bytes: text for textual media types, binary otherwise.
    private static func rawSchema(for mediaType: String) -> JSONSchema {
        if mediaType == "application/json" { return .fragment(description: JSONSchema.anyJSONValue) }
        let textual = mediaType.hasPrefix("text/") || ["json", "xml", "yaml"].contains { mediaType.hasSuffix($0) }
        return textual ? .string : .string(format: .other("binary"))
    }

    /// A ``NoContent`` output always answers 204, whatever the operation's default status.
    private static func successStatus(of operation: GatewayCore.Route) -> Int {
        operation.io.output == NoContent.self ? 204 : operation.successStatus.code
    }

    private static func successResponse(of operation: GatewayCore.Route) -> OpenAPI.Response {
        let status = successStatus(of: operation)
        let description = reasonPhrase(for: status)
        let output = operation.io.output
        if output == NoContent.self {
            return OpenAPI.Response(description: description)
        }
        if let schema = operation.documentedOutput {
            return OpenAPI.Response(description: description, content: .direct([.json: OpenAPI.Content(schema: documented(schema))]))
        }
        if output == JSONValue.self || output == JSONDocument.self {
            return OpenAPI.Response(description: description, content: .direct([.json: OpenAPI.Content(schema: .fragment(description: JSONSchema.anyJSONValue))]))
        }
        if output == RawReply.self {
            var content: OrderedDictionary<OpenAPI.ContentType, OpenAPI.Content> = [:]
            if let shape = operation.io.outputShape {
                content[.json] = OpenAPI.Content(schema: SchemaReflector.schema(forOutput: shape))
            }
            for mediaType in operation.rawMediaTypes {
                if let type = OpenAPI.ContentType(rawValue: mediaType) { content[type] = OpenAPI.Content(schema: .string) }
            }
            if content.isEmpty { content[.txt] = OpenAPI.Content(schema: .string) }
            return OpenAPI.Response(description: description, content: .direct(content))
        }
        return OpenAPI.Response(
            description: description,
            content: .direct([.json: OpenAPI.Content(schema: SchemaReflector.schema(forOutput: output))])
        )
    }

    private static func reasonPhrase(for status: Int) -> String {
        // OpenAPI 3.1 requires a description on every response.
        let known: [Int: String] = [400: "Bad Request", 404: "Not Found", 409: "Conflict"]
        let phrase = HTTPResponse.Status(code: status).reasonPhrase
        return known[status] ?? (phrase.isEmpty ? "Success" : phrase)
    }

    private static func security(for access: AccessRule) -> [OpenAPI.SecurityRequirement]? {
        guard access != .public else { return nil }
        // A key carries scopes, which only narrow it; a session holds none, so only the key
        // alternative names the scope (and an administrators' route needs `admin` of a key).
        let scopes: [String]
        switch access {
        case .scope(let scope), .granted(let scope): scopes = [scope]
        case .admin: scopes = [Principal.adminScope]
        default: scopes = []
        }
        return [
            [.component(named: SecuritySchemeName.bearer): []],
            [.component(named: SecuritySchemeName.apiKey): scopes],
        ]
    }

    private static func seconds(of duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds) + (attoseconds > 0 ? 1 : 0)
    }

    // MARK: Components

    private enum SecuritySchemeName {
        static let bearer = "bearer"
        static let apiKey = "apiKey"
    }

    private enum ProblemResponse {
        static let badRequest = "BadRequest"
        static let invalidInput = "InvalidInput"
        static let unauthorized = "Unauthorized"
        static let forbidden = "Forbidden"
        static let tooManyRequests = "TooManyRequests"
        static let problem = "Problem"
    }

    private static let problemSchemaName = "Problem"

    private static func problemReference(_ name: String) -> Either<OpenAPI.Reference<OpenAPI.Response>, OpenAPI.Response> {
        .a(.component(named: name))
    }

    private static var problemContent: OpenAPI.Content.Map {
        let problemJSON = OpenAPI.ContentType(rawValue: "application/problem+json") ?? .json
        return .direct([problemJSON: OpenAPI.Content(schema: .reference(.component(named: problemSchemaName)))])
    }

    private static func problemResponse(_ description: String, headers: OpenAPI.Header.Map? = nil) -> OpenAPI.Response {
        OpenAPI.Response(description: description, headers: headers, content: problemContent)
    }

    /// RFC 9457 problem details as the gateway writes them (`GatewayError`).
    private static var problemSchema: JSONSchema {
        .object(
            description: "An RFC 9457 problem document. Extension members (such as `violated-policies`) may appear beside these.",
            properties: [
                "type": .string(format: .uriReference, description: "Identifies the problem type."),
                "title": .string(description: "A short summary of the problem type."),
                "status": .integer(description: "The HTTP status code."),
                "detail": .string(required: false, description: "What went wrong this time."),
                "instance": .string(format: .uriReference, required: false, description: "Identifies this occurrence."),
                "errors": JSONSchema.any(
                    of: [
                        .array(
                            description: "The offending input fields.",
                            items: .object(properties: [
                                "pointer": .string(description: "A JSON pointer into the body, or `path.<name>` / `query.<name>`."),
                                "detail": .string(description: "What is wrong with the field."),
                            ])
                        ),
                        .object(
                            description: "A composite's failed steps: each one's problem document, by step name.",
                            additionalProperties: .b(.reference(.component(named: problemSchemaName)))
                        ),
                    ]
                ).optionalSchemaObject(),
            ]
        )
    }

    /// A JSON Schema a plugin gave as JSON; one OpenAPIKit cannot read is described as any JSON value.
    static func documented(_ schema: JSONValue) -> JSONSchema {
        (try? JSONDecoder().decode(JSONSchema.self, from: Data(schema.serialized().readableBytesView)))
            ?? .fragment(description: JSONSchema.anyJSONValue)
    }

    private static func components(adding named: OrderedDictionary<OpenAPI.ComponentKey, JSONSchema>) -> OpenAPI.Components {
        let integerHeader = OpenAPI.Header(schema: .integer)
        let stringHeader = OpenAPI.Header(schema: .string)
        var schemas: OrderedDictionary<OpenAPI.ComponentKey, JSONSchema> = [OpenAPI.ComponentKey(stringLiteral: problemSchemaName): problemSchema]
        for (key, schema) in named where schemas[key] == nil { schemas[key] = schema }
        return .direct(
            schemas: schemas,
            responses: [
                OpenAPI.ComponentKey(stringLiteral: ProblemResponse.badRequest): problemResponse(
                    "The request cannot be read (malformed JSON or parameters)."),
                OpenAPI.ComponentKey(stringLiteral: ProblemResponse.invalidInput): problemResponse(
                    "The input is well-formed but invalid; `errors` names each field."),
                OpenAPI.ComponentKey(stringLiteral: ProblemResponse.unauthorized): problemResponse(
                    "Authentication is required, or the credential is no longer valid.",
                    headers: ["WWW-Authenticate": .b(stringHeader)]
                ),
                OpenAPI.ComponentKey(stringLiteral: ProblemResponse.forbidden): problemResponse("The caller may not do this."),
                OpenAPI.ComponentKey(stringLiteral: ProblemResponse.tooManyRequests): problemResponse(
                    "The caller's rate limit is used up.",
                    headers: [
                        "Retry-After": .b(OpenAPI.Header(schema: .integer, description: "Seconds until the limit allows another call.")),
                        "RateLimit-Policy": .b(stringHeader),
                        "RateLimit": .b(stringHeader),
                        "X-RateLimit-Limit": .b(integerHeader),
                        "X-RateLimit-Remaining": .b(integerHeader),
                        "X-RateLimit-Reset": .b(integerHeader),
                    ]
                ),
                OpenAPI.ComponentKey(stringLiteral: ProblemResponse.problem): problemResponse("Any other failure, as a problem document."),
            ],
            securitySchemes: [
                OpenAPI.ComponentKey(stringLiteral: SecuritySchemeName.bearer): .http(
                    scheme: "bearer",
                    description: "A session token from signing in, or an access token of an identity provider the gateway accepts (auth.providers), whose scopes limit it as a key's."
                ),
                OpenAPI.ComponentKey(stringLiteral: SecuritySchemeName.apiKey): .apiKey(
                    name: "X-Api-Key",
                    location: .header,
                    description: "An API key; its scopes limit what it may call."
                ),
            ]
        )
    }

    // MARK: The gateway's own endpoints

    /// The endpoints the host serves itself. Their shapes follow what `BuiltinEndpoints` writes.
    private static var gatewayEndpoints: [(OpenAPI.Path, OpenAPI.HttpMethod, OpenAPI.Operation)] {
        let health = JSONSchema.string(allowedValues: ["ok", "degraded", "failing"])
        let plugin = JSONSchema.object(properties: [
            "id": .string,
            "summary": .string,
            "mount": .string,
            "status": health,
            "reason": .string(required: false, description: "Why the plugin is not ok."),
            "operations": .integer(description: "How many native operations it offers."),
            "dialects": .array(items: .string),
        ])
        let readiness = JSONSchema.object(properties: [
            "status": health,
            "database": health,
            "plugins": .array(items: plugin),
        ])
        func json(_ schema: JSONSchema) -> OpenAPI.Content.Map {
            .direct([.json: OpenAPI.Content(schema: schema)])
        }
        func endpoint(_ id: String, _ summary: String, _ ok: OpenAPI.Response, others: OpenAPI.Response.Map = [:]) -> OpenAPI.Operation {
            var responses: OpenAPI.Response.Map = [.status(code: 200): .b(ok)]
            for (status, response) in others { responses[status] = response }
            responses[.default] = problemReference(ProblemResponse.problem)
            return OpenAPI.Operation(
                tags: [gatewayTag],
                summary: summary,
                operationId: "gateway.\(id)",
                responses: responses,
                vendorExtensions: ["x-gateway-access": AnyCodable(AccessRule.public.summary)]
            )
        }
        let prometheus = OpenAPI.ContentType(rawValue: "text/plain; version=0.0.4; charset=utf-8") ?? .txt
        return [
            (
                "/healthz", .get,
                endpoint(
                    "healthz", "Liveness: the process answers",
                    OpenAPI.Response(description: "The process is alive", content: json(.object(properties: ["status": health])))
                )
            ),
            (
                "/readyz", .get,
                endpoint(
                    "readyz", "Readiness: the database and every plugin's health",
                    OpenAPI.Response(description: "Ready, possibly degraded", content: json(readiness)),
                    others: [
                        .status(code: 503): .b(
                            OpenAPI.Response(description: "The database or a plugin is failing", content: json(readiness)))
                    ]
                )
            ),
            (
                "/metrics", .get,
                endpoint(
                    "metrics", "Prometheus metrics, for administrators (X-Api-Key, or Authorization: Bearer with a session or a gk_ key) unless server.publicMetrics",
                    OpenAPI.Response(
                        description: "The Prometheus text format", content: .direct([prometheus: OpenAPI.Content(schema: .string)]))
                )
            ),
            (
                "/openapi.json", .get,
                endpoint(
                    "openapi", "The OpenAPI 3.1 document of the enabled plugins",
                    OpenAPI.Response(description: "This document", content: json(.object(description: "An OpenAPI 3.1 document.")))
                )
            ),
            (
                "/v1/plugins", .get,
                endpoint(
                    "plugins", "The enabled plugins, their mounts and health",
                    OpenAPI.Response(description: "The plugins", content: json(.object(properties: ["items": .array(items: plugin)])))
                )
            ),
        ]
    }
}

import Foundation
import GatewayCore
import HTTPTypes
import NIOCore
import OpenAPIKit
import Testing

@testable import GatewayServer

// MARK: Fixtures

/// The types and plugin the OpenAPI tests describe. Nesting them keeps their short names from
/// clashing with other test files in this module; the suites below live in extensions so they
/// find them unqualified.
enum OpenAPIFixtures {

    fileprivate struct NoteQuery: Decodable, Sendable {
        var limit: Int?
        var q: String
    }

    fileprivate struct NoteID: Decodable, Sendable {
        var id: String
    }

    fileprivate enum Priority: String, Codable, CaseIterable, Sendable {
        case low, normal, high
    }

    fileprivate enum Stars: Int, Codable, CaseIterable, Sendable {
        case one = 1, two, three
    }

    fileprivate struct ChecklistItem: Codable, Sendable {
        var text: String
        var done: Bool?
    }

    fileprivate struct NewNote: Decodable, Sendable {
        var title: String
        var priorities: [Priority]
        var checklist: [ChecklistItem]
        var first: ChecklistItem?
        var due: Date?
        var link: URL
        var owner: UUID
        var counts: [String: Int]
        var rating: Stars
        var weight: Double
        var tags: Set<String>
    }

    fileprivate struct Note: Codable, Sendable {
        var id: String
        var title: String
        var created: Date
    }

    /// Refers to itself both through an array and through an optional.
    fileprivate final class Folder: Decodable, Sendable {
        let name: String
        let children: [Folder]
        let parent: Folder?
    }

    /// Rejects the empty string it is given while being reflected.
    fileprivate struct Slug: Decodable, Sendable {
        var value: String
        init(from decoder: any Decoder) throws {
            value = try decoder.singleValueContainer().decode(String.self)
            guard !value.isEmpty else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "empty slug"))
            }
        }
    }

    fileprivate struct Article: Decodable, Sendable {
        var title: String
        var slug: Slug
        var body: String
    }

    /// Names its cases by hand, so only ``SchemaEnumerable`` tells the reflector about them.
    fileprivate struct Colour: Decodable, Sendable, SchemaEnumerable {
        static let allCaseNames = ["red", "green"]
        var name: String
        init(from decoder: any Decoder) throws {
            name = try decoder.singleValueContainer().decode(String.self)
            guard Self.allCaseNames.contains(name) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "unknown colour"))
            }
        }
    }

    fileprivate struct Paint: Decodable, Sendable {
        var colour: Colour
        var coats: Int
    }

    /// Reads whatever keys it is given, as a dictionary does, but by hand.
    fileprivate struct Scores: Decodable, Sendable {
        struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init?(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        var values: [String: Double] = [:]
        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: AnyKey.self)
            for key in container.allKeys {
                values[key.stringValue] = try container.decode(Double.self, forKey: key)
            }
        }
    }

    /// A point as `[longitude, latitude]`.
    fileprivate struct Point: Decodable, Sendable {
        var longitude: Double
        var latitude: Double
        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            longitude = try container.decode(Double.self)
            latitude = try container.decode(Double.self)
        }
    }

    fileprivate struct Upload: Decodable, Sendable {
        var scores: Scores
        var location: Point
        var attachment: Data
    }

    fileprivate struct CSVUpload: RawBodyInput {
        static let acceptedMediaTypes = ["text/csv"]
        var text: String
        init(bytes: ByteBuffer, contentType: String) throws { text = String(buffer: bytes) }
        init(from decoder: any Decoder) throws { text = try decoder.singleValueContainer().decode(String.self) }
    }

    fileprivate struct Summary: Encodable, Sendable {
        var count: Int
    }

    static let notesPlugin = PluginDescription(
        id: "notes",
        summary: "Short notes",
        mount: "/v1/notes/",
        operations: [
            GatewayCore.Route.define("notes.list", .get, "", summary: "List notes")
                .cache(.shared(ttl: .seconds(300)))
                .query(NoteQuery.self)
                .returns([Note].self) { _, _ in [] },
            GatewayCore.Route.define("notes.get", .get, "/{id}", summary: "Read one note")
                .details("Any note, by id.")
                .path(NoteID.self)
                .returns(Note.self) { input, _ in Note(id: input.path.id, title: "", created: Date()) },
            GatewayCore.Route.define("notes.create", .post, "/", summary: "Write a note")
                .access(.user)
                .cost(5)
                .body(NewNote.self)
                .returns(Note.self) { input, _ in Note(id: "1", title: input.body.title, created: Date()) },
            GatewayCore.Route.define("notes.delete", .delete, "/{id}", summary: "Delete a note")
                .access(.owner)
                .path(NoteID.self)
                .returns(NoContent.self) { _, _ in NoContent() },
            GatewayCore.Route.define("notes.import", .post, "/import", summary: "Import notes from CSV")
                .access(.scope("notes:write"))
                .body(CSVUpload.self)
                .returns(Summary.self) { _, _ in Summary(count: 0) },
            GatewayCore.Route.define("notes.export", .get, "/export", summary: "Export notes as text")
                .returns(RawReply.self) { _, _ in RawReply(text: "") },
        ]
    )
}

private func notesDocument() -> OpenAPI.Document {
    OpenAPIDocumentBuilder.document(
        title: "Gateway", version: "1.0.0", serverURL: "http://127.0.0.1:8080", plugins: [OpenAPIFixtures.notesPlugin]
    )
}

private func documentedOperation(_ id: String, in document: OpenAPI.Document) -> OpenAPI.Operation? {
    document.routes.lazy.flatMap { route in route.pathItem.endpoints }.first { $0.operation.operationId == id }?.operation
}

// MARK: Reflection

extension OpenAPIFixtures {
    @Suite("Schema reflection")
    struct SchemaReflectionTests {
        @Test("a query struct's optional field is an optional parameter and a plain field a required one")
        func queryParameters() {
            let parameters = SchemaReflector.parameters(of: NoteQuery.self)
            #expect(parameters.map(\.name) == ["limit", "q"])
            #expect(parameters[0].required == false)
            #expect(parameters[0].schema.jsonType == .integer)
            #expect(parameters[1].required == true)
            #expect(parameters[1].schema.jsonType == .string)
        }

        @Test("NoInput has no parameters")
        func noInput() {
            #expect(SchemaReflector.parameters(of: NoInput.self).isEmpty)
        }

        @Test("a nested body with an array of enum values reflects every field")
        func nestedBody() throws {
            let object = try #require(SchemaReflector.schema(for: NewNote.self).objectContext)
            #expect(
                Set(object.requiredProperties) == [
                    "title", "priorities", "checklist", "link", "owner", "counts", "rating", "weight", "tags",
                ])
            #expect(Set(object.optionalProperties) == ["first", "due"])

            let priorities = try #require(object.properties["priorities"]?.arrayContext?.items)
            #expect(priorities.jsonType == .string)
            #expect(priorities.allowedValues == ["low", "normal", "high"])

            let item = try #require(object.properties["checklist"]?.arrayContext?.items?.objectContext)
            #expect(item.requiredProperties == ["text"])
            #expect(item.optionalProperties == ["done"])
            #expect(item.properties["done"]?.jsonType == .boolean)
            #expect(object.properties["first"]?.objectContext?.requiredProperties == ["text"])

            #expect(object.properties["due"]?.formatString == "date-time")
            #expect(object.properties["link"]?.formatString == "uri")
            #expect(object.properties["owner"]?.formatString == "uuid")
            #expect(object.properties["weight"]?.jsonType == .number)
            #expect(object.properties["rating"]?.allowedValues == [1, 2, 3])
            #expect(object.properties["tags"]?.arrayContext?.uniqueItems == true)

            let counts = try #require(object.properties["counts"]?.objectContext?.additionalProperties?.b)
            #expect(counts.jsonType == .integer)
        }

        @Test("a type that contains itself is described down to the repetition")
        func recursion() throws {
            let folder = try #require(SchemaReflector.schema(for: Folder.self).objectContext)
            #expect(folder.requiredProperties == ["name", "children"])
            #expect(folder.properties["children"]?.arrayContext?.items?.isObject == true)
            #expect(folder.properties["parent"]?.isObject == true)
        }

        @Test("a type that rejects the placeholders keeps the fields asked before it threw")
        func rejectedPlaceholder() throws {
            let article = try #require(SchemaReflector.schema(for: Article.self).objectContext)
            #expect(article.properties["title"]?.jsonType == .string)
            #expect(article.properties["slug"]?.jsonType == .string)
        }

        @Test("a SchemaEnumerable type is an enum and decodes from its first name")
        func schemaEnumerable() throws {
            let paint = try #require(SchemaReflector.schema(for: Paint.self).objectContext)
            #expect(paint.properties["colour"]?.allowedValues == ["red", "green"])
            // `coats` comes after `colour`: reached only if a placeholder colour was made.
            #expect(paint.requiredProperties == ["colour", "coats"])
        }

        @Test("hand-written decoding of arbitrary keys, fixed-length arrays and data is described")
        func handWritten() throws {
            let upload = try #require(SchemaReflector.schema(for: Upload.self).objectContext)
            #expect(upload.requiredProperties == ["scores", "location", "attachment"])
            let scores = try #require(upload.properties["scores"]?.objectContext)
            #expect(scores.properties.isEmpty)
            #expect(scores.additionalProperties?.b?.jsonType == .number)
            #expect(upload.properties["location"]?.arrayContext?.items?.jsonType == .number)
            #expect(upload.properties["attachment"]?.stringContext?.contentEncoding == .base64)
        }

        @Test("an output that is only Encodable is a generic object, RawReply a string")
        func outputs() {
            #expect(SchemaReflector.schema(forOutput: Summary.self).isObject)
            #expect(SchemaReflector.schema(forOutput: Summary.self).objectContext?.properties.isEmpty == true)
            #expect(SchemaReflector.schema(forOutput: RawReply.self).isString)
            #expect(SchemaReflector.schema(forOutput: Note.self).objectContext?.requiredProperties == ["id", "title", "created"])
        }
    }
}

// MARK: The document

extension OpenAPIFixtures {
    @Suite("OpenAPI document")
    struct OpenAPIDocumentTests {
        @Test("the document passes OpenAPIKit's validation")
        func validates() throws {
            try notesDocument().validate()
        }

        @Test("the JSON parses and names every operation id")
        func json() throws {
            let data = try OpenAPIDocumentBuilder.json(notesDocument())
            let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            #expect(root["openapi"] as? String == "3.1.1")
            let text = try #require(String(data: data, encoding: .utf8))
            for id in ["notes.list", "notes.get", "notes.create", "notes.delete", "notes.import", "notes.export", "gateway.healthz"] {
                #expect(text.contains("\"operationId\" : \"\(id)\""))
            }
            let paths = try #require(root["paths"] as? [String: Any])
            #expect(
                Set(paths.keys) == [
                    "/v1/notes", "/v1/notes/{id}", "/v1/notes/import", "/v1/notes/export",
                    "/healthz", "/readyz", "/metrics", "/openapi.json", "/v1/plugins",
                ])
            #expect(try OpenAPIDocumentBuilder.json(notesDocument()) == data)
        }

        @Test("a mount and a path join with one slash, and an empty path is the mount")
        func joining() {
            #expect(OpenAPIDocumentBuilder.joined(mount: "/v1/notes", path: "/notes/{id}") == "/v1/notes/notes/{id}")
            #expect(OpenAPIDocumentBuilder.joined(mount: "/v1/notes/", path: "/{id}") == "/v1/notes/{id}")
            #expect(OpenAPIDocumentBuilder.joined(mount: "/v1/notes", path: "") == "/v1/notes")
            #expect(OpenAPIDocumentBuilder.joined(mount: "/v1/notes", path: "/") == "/v1/notes")
            #expect(OpenAPIDocumentBuilder.joined(mount: "/", path: "") == "/")
        }

        @Test("every plugin has a tag, and the gateway's endpoints have theirs")
        func tags() throws {
            let document = notesDocument()
            #expect(document.tags?.map(\.name) == ["gateway", "notes"])
            #expect(document.tags?.last?.description == "Short notes")
            let metrics = try #require(documentedOperation("gateway.metrics", in: document)?.responses[status: 200]?.b)
            #expect(metrics.content.keys.map(\.typeAndSubtype) == ["text/plain"])
            #expect(documentedOperation("gateway.plugins", in: document)?.tags == ["gateway"])
            let readiness = try #require(documentedOperation("gateway.readyz", in: document))
            #expect(readiness.responses[status: 503]?.b?.content[.json] != nil)
        }

        @Test("path and query parameters come from the declared types")
        func parameters() throws {
            let document = notesDocument()
            let get = try #require(documentedOperation("notes.get", in: document))
            let id = try #require(get.parameters.first?.b)
            #expect(id.name == "id")
            #expect(id.location == .path)
            #expect(id.required)

            let list = try #require(documentedOperation("notes.list", in: document))
            let query = list.parameters.compactMap(\.b)
            #expect(query.map(\.name) == ["limit", "q"])
            #expect(query.map(\.required) == [false, true])
            #expect(query.allSatisfy { $0.location == .query })
        }

        @Test("a create documents its JSON body and answers 201 with its output")
        func create() throws {
            let create = try #require(documentedOperation("notes.create", in: notesDocument()))
            let body = try #require(create.requestBody?.b)
            #expect(body.required)
            let schema = try #require(body.content[.json]?.b?.schema)
            #expect(schema.objectContext?.properties["priorities"]?.arrayContext?.items?.allowedValues == ["low", "normal", "high"])
            let created = try #require(create.responses[status: 201]?.b)
            #expect(created.content[.json]?.b?.schema?.objectContext?.requiredProperties == ["id", "title", "created"])
        }

        @Test("a raw body is documented under its own media types")
        func rawBody() throws {
            let upload = try #require(documentedOperation("notes.import", in: notesDocument()))
            let csv = try #require(OpenAPI.ContentType(rawValue: "text/csv"))
            #expect(upload.requestBody?.b?.content[csv]?.b?.schema?.isString == true)
            #expect(upload.requestBody?.b?.content[.json] == nil)
        }

        @Test("NoContent answers 204 without a body, RawReply answers text")
        func replies() throws {
            let document = notesDocument()
            let delete = try #require(documentedOperation("notes.delete", in: document))
            #expect(delete.responses[status: 204]?.b?.content.isEmpty == true)
            #expect(delete.responses[status: 200] == nil)
            let export = try #require(documentedOperation("notes.export", in: document))
            #expect(export.responses[status: 200]?.b?.content[.txt]?.b?.schema?.isString == true)
        }

        @Test("every operation documents problems; 400/422 only with input, 401/403 only when not public")
        func problems() throws {
            let document = notesDocument()
            let problem = try #require(document.components.schemas["Problem"]?.objectContext)
            #expect(Set(problem.properties.keys) == ["type", "title", "status", "detail", "instance", "errors"])

            let export = try #require(documentedOperation("notes.export", in: document))
            #expect(export.responses[.default] != nil)
            #expect(export.responses[status: 429] != nil)
            #expect(export.responses[status: 400] == nil)
            #expect(export.responses[status: 401] == nil)

            let delete = try #require(documentedOperation("notes.delete", in: document))
            for status in [400, 401, 403, 422, 429] {
                #expect(delete.responses[status: .status(code: status)] != nil, "missing \(status)")
            }
            let limited = try #require(document.components.responses["TooManyRequests"]?.b)
            #expect(limited.content[try #require(OpenAPI.ContentType(rawValue: "application/problem+json"))] != nil)
            #expect(limited.headers?["Retry-After"] != nil)
        }

        @Test("operations that are not public accept a bearer token or an API key")
        func security() throws {
            let document = notesDocument()
            #expect(document.components.securitySchemes["bearer"]?.b?.type == .http(scheme: "bearer", bearerFormat: nil))
            #expect(document.components.securitySchemes["apiKey"]?.b?.type == .apiKey(name: "X-Api-Key", location: .header))

            #expect(documentedOperation("notes.get", in: document)?.security == nil)
            let create = try #require(documentedOperation("notes.create", in: document)?.security)
            #expect(create.count == 2)
            #expect(create[0][.component(named: "bearer")] == [])
            let upload = try #require(documentedOperation("notes.import", in: document)?.security)
            #expect(upload[1][.component(named: "apiKey")] == ["notes:write"])
        }

        @Test("vendor extensions carry the access rule, the cache TTL and the cost")
        func extensions() throws {
            let document = notesDocument()
            let list = try #require(documentedOperation("notes.list", in: document))
            #expect(list.vendorExtensions["x-gateway-access"] == "public")
            #expect(list.vendorExtensions["x-gateway-cache"] == 300)
            #expect(list.vendorExtensions["x-gateway-cost"] == 1)
            let create = try #require(documentedOperation("notes.create", in: document))
            #expect(create.vendorExtensions["x-gateway-access"] == "signed-in user")
            #expect(create.vendorExtensions["x-gateway-cache"] == "none")
            #expect(create.vendorExtensions["x-gateway-cost"] == 5)
        }
    }
}

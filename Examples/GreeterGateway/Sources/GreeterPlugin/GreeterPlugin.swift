import Foundation
import GatewayCore
import SQLKit

/// A plugin that lives outside the gateway's repository: greetings with a native API (one
/// operation, a list, a write) and a tiny legacy dialect, `GET /hello.txt?who=Ada`.
public struct GreeterPlugin: ServicePlugin {
    public static let id = "greeter"
    public static let summary = "Greets people and remembers whom"
    public static let migrations = [
        Migration(1, "create greeter_greetings") { db in
            try await db.create(table: "greeter_greetings")
                .column("id", type: .bigint, .primaryKey(autoIncrement: true))
                .column("name", type: .text, .notNull)
                .column("owner", type: .text)
                .run()
        },
    ]

    /// plugins.yaml's `config:` block; the defaults are a value, no `init(from:)` needed.
    public struct Configuration: PluginConfiguration {
        public var greeting = "Hello"
        public var cacheFor = ConfigDuration(seconds: 60)
        public static let defaults = Configuration()

        public func validate() throws {
            guard !greeting.isEmpty, greeting.count <= 40 else { throw ConfigurationError(key: "greeting", "must be 1 to 40 characters") }
        }
    }

    public struct NameQuery: Codable, Sendable, ValidatableInput {
        public var name: String
        public func validate() -> [GatewayError.FieldError] {
            (1...100).contains(name.count) ? [] : [.init(pointer: "name", detail: "must be 1 to 100 characters")]
        }
    }

    public struct Greeting: Codable, Sendable, Equatable {
        public var id: String?
        public var text: String
    }

    let configuration: Configuration
    let database: any SQLDatabase

    public init(configuration: Configuration, context: PluginContext) async throws {
        self.configuration = configuration
        database = context.database
    }

    public var routes: [Route] {
        let greeting = configuration.greeting
        let database = self.database
        return [
            Route.define("greeter.greet", .get, "/greet", summary: "Greet someone")
                .query(NameQuery.self)
                .cache(.shared(ttl: configuration.cacheFor.duration))
                .returns(Greeting.self) { input, _ in
                    Greeting(id: nil, text: "\(greeting), \(input.query.name)!")
                },
            Route.define("greeter.greetings.create", .post, "/greetings", summary: "Remember a greeting")
                .access(.user)
                .body(NameQuery.self)
                .cache(.invalidating(["greeter:greetings"]))
                .replies(Greeting.self) { input, context in
                    let row = try await database.insert(into: "greeter_greetings").columns("name", "owner")
                        .values(SQLBind(input.body.name), SQLBind(context.principal.userID)).returning("id").first()
                    let id = String(try row?.decode(column: "id", as: Int64.self) ?? 0)
                    return Reply(Greeting(id: id, text: "\(greeting), \(input.body.name)!"), headers: [.location: "/v1/greeter/greetings/\(id)"])
                },
            Route.define("greeter.greetings.list", .get, "/greetings", summary: "The greetings remembered, oldest first")
                .query(PageQuery.self)
                .cache(.shared(ttl: .seconds(30), tags: ["greeter:greetings"]))
                .returns(Page<Greeting>.self) { input, _ in
                    let after = Int64(input.query.cursor ?? "0") ?? 0
                    let rows = try await database.select().columns("id", "name").from("greeter_greetings")
                        .where("id", .greaterThan, SQLBind(after)).orderBy("id").limit(input.query.size + 1).all()
                    let items = try rows.prefix(input.query.size).map { row in
                        Greeting(id: String(try row.decode(column: "id", as: Int64.self)), text: "\(greeting), \(try row.decode(column: "name", as: String.self))!")
                    }
                    return Page(items: items, nextCursor: rows.count > input.query.size ? items.last?.id : nil)
                },
        ]
    }

    /// The old client's API: plain text, `?who=`, a key in `?token=`, errors as `ERR <status> <detail>`.
    public var dialects: [Dialect] {
        let greeting = configuration.greeting
        return [
            Dialect(
                name: "classic",
                routes: [
                    Route.define(.get, "/hello.txt", summary: "Plain-text greeting for ?who=")
                        .query(ClassicQuery.self)
                        .handleDecoded { call, _ in .text("\(greeting), \(call.query.who)") },
                ],
                credentials: .apiKeyQuery("token"),
                renderError: { error in .text("ERR \(error.status.code) \(error.detail)", status: .ok) }),
        ]
    }

    public struct ClassicQuery: Codable, Sendable {
        public var who: String
    }
}

import Foundation

/// A page a plugin adds to the admin console (``ServicePlugin/adminViews``). The console lists it
/// in its navigation as `<plugin>: <title>`, shows what ``load`` returns — figures, tables with
/// actions, a chart, a form, text — and runs an ``actions`` entry when an administrator submits one
/// (after checking their session and CSRF token, and writing it to the audit log). The console has
/// no plugin's name in its code: a plugin's views are all it knows of it.
public struct AdminView: Sendable {
    /// Lowercase letters, digits and `-` (the page's path: `/admin/plugins/<plugin>/<id>`).
    public var id: String
    public var title: String
    /// Seconds between reloads of the page while it is shown (a live chart); nil: none.
    public var refresh: Int?
    /// What the page shows now.
    public var load: @Sendable (AdminViewRequest) async throws -> [AdminSection]
    /// What its tables' and forms' actions do, by name: the message shown after one. A
    /// ``GatewayError`` is shown as it is.
    public var actions: [String: @Sendable (AdminViewRequest) async throws -> String]

    public init(id: String, title: String, refresh: Int? = nil, load: @escaping @Sendable (AdminViewRequest) async throws -> [AdminSection],
                actions: [String: @Sendable (AdminViewRequest) async throws -> String] = [:]) {
        self.id = id
        self.title = title
        self.refresh = refresh
        self.load = load
        self.actions = actions
    }
}

/// Who looks at a view, and what they sent (an action's arguments, a form's fields, the query).
public struct AdminViewRequest: Sendable {
    /// The administrator.
    public var principal: Principal
    public var arguments: [String: String]

    public init(principal: Principal, arguments: [String: String]) {
        self.principal = principal
        self.arguments = arguments
    }
}

/// One part of a view's page.
public enum AdminSection: Sendable {
    /// Labelled figures (an index's size, when a feed was last read).
    case figures(title: String, [AdminFigure])
    /// Rows, each with the actions it offers (confirm, reject).
    case table(title: String, columns: [String], rows: [AdminRow])
    /// A series over time, drawn as a line.
    case chart(title: String, label: String, points: [AdminPoint])
    /// Fields an administrator fills in for an action (a query to try); with the action `""`, the
    /// view is shown again with the fields as its arguments (a datastream to chart).
    case form(title: String, action: String, submitLabel: String, fields: [AdminField])
    case text(title: String, String)
}

public struct AdminFigure: Sendable {
    public var label: String
    public var value: String
    public init(_ label: String, _ value: String) {
        self.label = label
        self.value = value
    }
}

public struct AdminRow: Sendable {
    public var cells: [String]
    public var actions: [AdminAction]
    public init(_ cells: [String], actions: [AdminAction] = []) {
        self.cells = cells
        self.actions = actions
    }
}

/// A button that runs the view's action `action` with `arguments`.
public struct AdminAction: Sendable {
    public var label: String
    public var action: String
    public var arguments: [String: String]
    public init(_ label: String, action: String, arguments: [String: String] = [:]) {
        self.label = label
        self.action = action
        self.arguments = arguments
    }
}

public struct AdminField: Sendable {
    public var name: String
    public var label: String
    public var value: String
    public init(name: String, label: String, value: String = "") {
        self.name = name
        self.label = label
        self.value = value
    }
}

public struct AdminPoint: Sendable {
    public var at: Date
    public var value: Double
    public init(at: Date, value: Double) {
        self.at = at
        self.value = value
    }
}

extension AdminView {
    /// A URL as a view may show it: the password of its user information and the values of its
    /// secret-named query parameters (`token`, `key`, `secret`, `signature`, …) replaced by `***`.
    /// The configuration a view repeats may hold credentials an administrator is not shown
    /// elsewhere either.
    public static func redacted(url text: String) -> String {
        guard var components = URLComponents(string: text) else { return text.contains("@") ? "***" : text }
        if components.password != nil { components.password = "***" }
        components.queryItems = components.queryItems?.map { item in
            let name = item.name.lowercased()
            let secret = ["token", "secret", "password", "signature", "sig", "auth", "credential"].contains { name.contains($0) } || name.hasSuffix("key")
            return secret ? URLQueryItem(name: item.name, value: "***") : item
        }
        return components.string ?? text
    }
}

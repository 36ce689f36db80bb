import Foundation
import GatewayCore
import SQLKit

/// The admin console's page of the events plugin: the reservations waiting for a decision, each
/// confirmed or rejected as the event's owner would (``EventService/decide(_:confirm:reason:by:)``,
/// which tells the user).
extension EventsPlugin {
    /// The most reservations the page lists.
    static let adminReservationRows = 100

    public var adminViews: [AdminView] {
        let service = self.service
        return [
            AdminView(id: "reservations", title: "Reservations", load: { _ in
                try await Self.waitingReservations(service)
            }, actions: [
                "confirm": { request in try await Self.decideFromConsole(service, request, confirm: true) },
                "reject": { request in try await Self.decideFromConsole(service, request, confirm: false) },
            ]),
        ]
    }

    /// The requested reservations, newest first, with their event, showing and user.
    static func waitingReservations(_ service: EventService) async throws -> [AdminSection] {
        let store = service.store
        let page = try await store.reservations(status: .requested, limit: adminReservationRows, before: nil)
        var events: [Int64: EventStore.EventRow?] = [:]
        var showings: [Int64: Showing?] = [:]
        var users: [String: String] = [:]
        var rows: [AdminRow] = []
        for reservation in page.items {
            if events[reservation.event] == nil {
                let event = try await store.event(reservation.event)
                events[reservation.event] = .some(event)
            }
            if showings[reservation.showing] == nil {
                let showing = try await store.showing(reservation.showing)
                showings[reservation.showing] = .some(showing)
            }
            if users[reservation.user] == nil {
                users[reservation.user] = await userName(reservation.user, service: service)
            }
            let event = events[reservation.event] ?? nil
            let showing = showings[reservation.showing] ?? nil
            let when = event.flatMap { event in showing.map { service.when($0, event: event) } } ?? "showing \(reservation.showing)"
            let id = String(reservation.id)
            rows.append(AdminRow([
                id,
                event.map { "\($0.title) (\($0.id))" } ?? "event \(reservation.event)",
                when,
                users[reservation.user] ?? reservation.user,
                String(reservation.seats),
                LocalTime.format(reservation.requestedAt, zone: service.defaultZone) + " (\(service.defaultZone.identifier))",
            ], actions: [
                AdminAction("Confirm", action: "confirm", arguments: ["reservation": id]),
                AdminAction("Reject", action: "reject", arguments: ["reservation": id]),
            ]))
        }
        guard !rows.isEmpty else {
            return [.text(title: "Waiting for confirmation", "No reservation is waiting for confirmation.")]
        }
        let title = page.nextCursor == nil
            ? "Waiting for confirmation (\(rows.count), newest first)"
            : "Waiting for confirmation (the newest \(rows.count); more are waiting)"
        return [.table(title: title, columns: ["Reservation", "Event", "Showing", "User", "Seats", "Requested at"], rows: rows)]
    }

    /// `username (id)` of an account, or its id alone when it cannot be read.
    static func userName(_ id: String, service: EventService) async -> String {
        guard let account = try? await service.context.accounts.account(id: id) else { return id }
        return "\(account.username) (\(id))"
    }

    /// Confirms or rejects the reservation named by the `reservation` argument; the user is told.
    static func decideFromConsole(_ service: EventService, _ request: AdminViewRequest, confirm: Bool) async throws -> String {
        guard let text = request.arguments["reservation"], let id = Int64(text.trimmingCharacters(in: .whitespaces)) else {
            throw GatewayError.invalid(field: "reservation", "must be a reservation's id")
        }
        let reason = request.arguments["reason"].flatMap { $0.isEmpty ? nil : $0 }
        let decided = try await service.decide(id, confirm: confirm, reason: reason, by: request.principal)
        let user = await userName(decided.user, service: service)
        return "Reservation \(decided.id) \(confirm ? "confirmed" : "rejected"); \(user) was notified."
    }
}

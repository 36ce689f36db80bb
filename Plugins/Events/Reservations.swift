import Foundation
import GatewayCore
import SQLKit

/// Reservations: seats held on a showing's counter and a row per request.
///
/// A reservation's row and the seats it holds are written by one statement: the insert, whose
/// trigger adds the seats to the showing's counter and refuses the insert when that would exceed
/// the capacity. On SQLite every write statement runs in turn; on PostgreSQL the insert's
/// transaction locks the showing's row first, which orders concurrent requests for a showing. So a
/// showing can never be oversold on either, a refused or failed request leaves no trace, and a
/// crash cannot lose seats. Cancelling or rejecting frees them in the transaction that records it.
extension EventStore {
    static let reservationColumns = "id, showing_id, event_id, user_id, seats, status, requested_at, decided_at, decided_by, reason, cancelled_at"

    static func decodeReservation(_ row: any SQLRow) throws -> Reservation {
        func date(_ column: String) throws -> Date? {
            try row.decode(column: column, as: Int64?.self).map { Date(timeIntervalSince1970: Double($0)) }
        }
        return Reservation(
            id: try row.decode(column: "id", as: Int64.self), showing: try row.decode(column: "showing_id", as: Int64.self),
            event: try row.decode(column: "event_id", as: Int64.self), user: try row.decode(column: "user_id", as: String.self),
            seats: try row.decode(column: "seats", as: Int.self),
            status: ReservationStatus(rawValue: try row.decode(column: "status", as: String.self)) ?? .cancelled,
            requestedAt: try date("requested_at") ?? Date(timeIntervalSince1970: 0), decidedAt: try date("decided_at"),
            decidedBy: try row.decode(column: "decided_by", as: String?.self), reason: try row.decode(column: "reason", as: String?.self),
            cancelledAt: try date("cancelled_at"))
    }

    /// What a reservation request needs of its showing and event, read in one statement.
    struct ReservationTarget: Sendable {
        var showing: Int64
        var start: Date
        var end: Date
        var allDay: Bool
        var event: Int64
        var title: String
        var city: Int?
        var owner: String?
        var status: EventStatus
        var policy: ReservationPolicy?
    }

    func reservationTarget(_ showing: Int64) async throws -> ReservationTarget? {
        guard let row = try await database.raw("""
            SELECT s.starts_at AS starts_at, s.ends_at AS ends_at, s.all_day AS all_day, e.id AS event_id, e.title AS title, e.city_id AS city_id,
              e.owner_id AS owner_id, e.status AS status, e.reservation_policy AS reservation_policy
            FROM events_showings s JOIN events_events e ON e.id = s.event_id WHERE s.id = \(bind: showing)
            """).first() else { return nil }
        return ReservationTarget(
            showing: showing, start: Date(timeIntervalSince1970: Double(try row.decode(column: "starts_at", as: Int64.self))),
            end: Date(timeIntervalSince1970: Double(try row.decode(column: "ends_at", as: Int64.self))),
            allDay: try row.decode(column: "all_day", as: Int.self) != 0, event: try row.decode(column: "event_id", as: Int64.self),
            title: try row.decode(column: "title", as: String.self), city: try row.decode(column: "city_id", as: Int?.self),
            owner: try row.decode(column: "owner_id", as: String?.self),
            status: EventStatus(rawValue: try row.decode(column: "status", as: String.self)) ?? .draft,
            policy: try row.decode(column: "reservation_policy", as: String?.self).flatMap(ReservationPolicy.init(rawValue:)))
    }

    func reservation(_ id: Int64) async throws -> Reservation? {
        try await database.raw("SELECT \(unsafeRaw: Self.reservationColumns) FROM events_reservations WHERE id = \(bind: id)").first().map(Self.decodeReservation)
    }

    /// Holds `seats` of `showing` for `user`: 409 saying how many remain when too few do, or when
    /// the user already holds `maxActive` reservations of it (0: no limit).
    ///
    /// One statement: the reservation's insert, made only while the user holds fewer than
    /// `maxActive`, whose trigger (``EventsMigrations``) holds the seats or refuses the insert. On
    /// SQLite every write statement runs in turn on the one writer, so the count and the insert
    /// are one step. On PostgreSQL the insert runs in a transaction that first locks the
    /// showing's row, so that two requests of one user are counted one after the other.
    func reserve(showing: Int64, event: Int64, user: String, seats: Int, status: ReservationStatus, maxActive: Int) async throws -> Reservation {
        let now = now()
        let decided: Int64? = status == .confirmed ? now : nil
        let insert: SQLQueryString = """
            INSERT INTO events_reservations (showing_id, event_id, user_id, seats, status, requested_at, decided_at)
            SELECT \(bind: showing), \(bind: event), \(bind: user), \(bind: seats), \(bind: status.rawValue), \(bind: now), \(bind: decided)
            WHERE \(bind: maxActive) = 0 OR (SELECT COUNT(*) FROM events_reservations
              WHERE showing_id = \(bind: showing) AND user_id = \(bind: user) AND status IN ('requested', 'confirmed')) < \(bind: maxActive)
            RETURNING id
            """
        let row: (any SQLRow)?
        do {
            if !database.features.rowLocks {
                row = try await database.raw(insert).first()
            } else {
                row = try await database.transaction { db in
                    guard try await db.raw("SELECT id FROM events_showings WHERE id = \(bind: showing) FOR UPDATE").first() != nil else {
                        throw GatewayError.notFound("No such showing.")
                    }
                    return try await db.raw(insert).first()
                }
            }
        } catch let error as GatewayError {
            throw error
        } catch {
            // The trigger refused: say how many seats remain (any other failure stays what it is).
            let refused = String(reflecting: error).contains("too few seats remain")
            guard let seatsLeft = try await remainingSeats(showing), refused || seatsLeft < seats else { throw error }
            throw GatewayError.conflict(seatsLeft == 0 ? "No seats remain for this showing."
                                                       : "Only \(seatsLeft) seat\(seatsLeft == 1 ? "" : "s") remain\(seatsLeft == 1 ? "s" : "") for this showing.")
        }
        guard let id = try row?.decode(column: "id", as: Int64.self) else {
            throw GatewayError.conflict(maxActive == 1 ? "You already hold a reservation for this showing."
                                                       : "You already hold \(maxActive) reservations for this showing, the most allowed.")
        }
        return Reservation(id: id, showing: showing, event: event, user: user, seats: seats, status: status,
                           requestedAt: Date(timeIntervalSince1970: Double(now)), decidedAt: decided.map { Date(timeIntervalSince1970: Double($0)) },
                           decidedBy: nil, reason: nil, cancelledAt: nil)
    }

    /// The seats a showing has left (nil: unlimited, or no such showing).
    private func remainingSeats(_ showing: Int64) async throws -> Int? {
        guard let row = try await database.raw("SELECT capacity, seats_taken FROM events_showings WHERE id = \(bind: showing)").first(),
              let capacity = try row.decode(column: "capacity", as: Int?.self) else { return nil }
        return max(0, capacity - (try row.decode(column: "seats_taken", as: Int.self)))
    }

    /// Moves a reservation from one of `from` to `to`, freeing its seats when `to` holds none.
    /// 409 when it is no longer in one of `from` (decided or cancelled meanwhile).
    func transition(_ id: Int64, from: [ReservationStatus], to: ReservationStatus, by decider: String?, reason: String?) async throws -> Reservation {
        let now = now()
        return try await database.transaction { db in
            // A cancellation keeps who decided earlier; a decision records who made it.
            let changes: SQLQueryString = to == .cancelled
                ? "cancelled_at = \(bind: now), reason = COALESCE(\(bind: reason), reason)"
                : "decided_at = \(bind: now), decided_by = \(bind: decider), reason = \(bind: reason)"
            let row = try await db.raw("UPDATE events_reservations SET status = \(bind: to.rawValue), " + changes + """
                 WHERE id = \(bind: id) AND status IN (\(binds: from.map(\.rawValue)))
                RETURNING \(unsafeRaw: Self.reservationColumns)
                """).first()
            guard let row else {
                let current = try await db.raw("SELECT status FROM events_reservations WHERE id = \(bind: id)").first()?.decode(column: "status", as: String.self)
                guard let current else { throw GatewayError.notFound("No such reservation.") }
                throw GatewayError.conflict("This reservation is \(current); it cannot become \(to.rawValue).")
            }
            let reservation = try Self.decodeReservation(row)
            if !to.isActive {
                try await db.raw("UPDATE events_showings SET seats_taken = seats_taken - \(bind: reservation.seats) WHERE id = \(bind: reservation.showing)").run()
            }
            return reservation
        }
    }

    /// Cancels every active reservation of an event (the event was cancelled) and returns them.
    func cancelReservations(ofEvent event: Int64, reason: String, on db: any SQLDatabase) async throws -> [Reservation] {
        let rows = try await db.raw("""
            UPDATE events_reservations SET status = 'cancelled', cancelled_at = \(bind: now()), reason = \(bind: reason)
            WHERE event_id = \(bind: event) AND status IN ('requested', 'confirmed')
            RETURNING \(unsafeRaw: Self.reservationColumns)
            """).all()
        try await db.raw("UPDATE events_showings SET seats_taken = 0 WHERE event_id = \(bind: event)").run()
        return try rows.map(Self.decodeReservation)
    }

    /// A page of reservations, newest first: a user's (`user`) or an event's (`event`).
    func reservations(user: String? = nil, event: Int64? = nil, status: ReservationStatus?, limit: Int, before: Int64?) async throws -> Page<Reservation> {
        var sql: SQLQueryString = "SELECT \(unsafeRaw: Self.reservationColumns) FROM events_reservations WHERE id < \(bind: before ?? Int64.max)"
        if let user { sql += " AND user_id = \(bind: user)" }
        if let event { sql += " AND event_id = \(bind: event)" }
        if let status { sql += " AND status = \(bind: status.rawValue)" }
        sql += " ORDER BY id DESC LIMIT \(bind: limit + 1)"
        let found = try await database.raw(sql).all().map(Self.decodeReservation)
        let page = Array(found.prefix(limit))
        return Page(items: page, nextCursor: found.count > limit ? page.last.map { String($0.id) } : nil)
    }
}

import Foundation
import GatewayCore
import GatewaySupport

/// The COIMOTION twShow API of the old app (legacy-apis.md §1, seed 000), over the same service as
/// the native API. Accounts (`core/user/...`) come from the gateway's COIMOTION accounts dialect.
///
/// Shapes the public record leaves open, chosen as the old app would read them (*unverified*):
/// `catList` answers `list[] {catID, title}`; `time` is the local start `yyyy-MM-dd HH:mm` (the
/// app shows it as text); `isFree` is 1 or 0 like the service's other flags; `startDate` and
/// `endDate` are local days `yyyy-MM-dd`.
enum TwShowDialect {
    struct CategoryRow: Encodable, Sendable {
        var catID: Int
        var title: String
    }

    struct ShowRow: Encodable, Sendable {
        var spID: Int64
        var title: String
        var time: String
        var imgURL: String
    }

    struct ShowInfo: Encodable, Sendable {
        var time: String
        var placeName: String
        var addr: String
        var priceInfo: String
        var isFree: Int
        var latitude: Double?
        var longitude: Double?
    }

    struct Info: Encodable, Sendable {
        var spID: Int64
        var title: String
        var descTx: String
        var infoSrc: String
        var organizer: String
        var saleURL: String
        var imgURL: String
        var startDate: String
        var endDate: String
        var showInfo: [ShowInfo]
    }

    struct List<Row: Encodable & Sendable>: Encodable, Sendable {
        var list: [Row]
    }

    /// The most rows one `byCity` call answers (the app shows them in one table).
    static let maxRows = 2000

    static func make(service: EventService) -> Dialect {
        Coimotion.dialect(routes: [
            Route.define(.post, "/coimotion/twShow/show/catList", summary: "twShow: the categories (catID, title)")
                .handle(Coimotion.call { _, _ in
                    .ok(List(list: service.settings.categories.map { CategoryRow(catID: $0.id, title: $0.title) }))
                }),
            Route.define(.post, "/coimotion/twShow/show/byCity/{ctID}", summary: "twShow: a city's showings in a range of days (cat, fromTm, toTm)")
                .handle(Coimotion.call { call, _ in
                    let city = try call.pathInt("ctID")
                    try service.checkCity(city, pointer: "ctID")
                    let category = try call.int("cat")
                    try service.checkCategory(category, pointer: "cat")
                    let from = call.string("fromTm").flatMap { $0.isEmpty ? nil : $0 }
                    let to = call.string("toTm").flatMap { $0.isEmpty ? nil : $0 }
                    if let problem = DayRange.problems(from: from, to: to, fromName: "fromTm", toName: "toTm").first {
                        throw GatewayError.invalid(field: problem.pointer, problem.detail)
                    }
                    let zone = service.zone(of: city)
                    let rows = try await service.store.showingRows(city: city, category: category, window: service.window(city: city, from: from, to: to),
                                                                   limit: maxRows)
                    return .ok(List(list: rows.map { row in
                        ShowRow(spID: row.showing, title: row.title, time: LocalTime.format(Date(timeIntervalSince1970: Double(row.start)), zone: zone),
                                imgURL: row.image ?? "")
                    }))
                }),
            Route.define(.post, "/coimotion/twShow/show/info/{spID}", summary: "twShow: a showing's event with every showing (showInfo)")
                .handle(Coimotion.call { call, context in
                    let showingID = Int64(try call.pathInt("spID"))
                    guard let showing = try await service.store.showing(showingID) else { throw GatewayError.notFound("No such show.") }
                    let event = try await service.visibleEvent(showing.event, principal: context.principal)
                    let detail = try await service.detail(event.id)
                    await context.recordView(of: String(event.id), title: event.title)
                    let zone = service.zone(of: event.city)
                    let days = detail.showings.map { LocalTime.format($0.start, zone: zone, withTime: false) }
                    return .ok(Info(
                        spID: showingID, title: detail.title, descTx: detail.description ?? "", infoSrc: detail.infoSource ?? "",
                        organizer: detail.organizer ?? "", saleURL: detail.saleURL ?? "", imgURL: detail.imageURL ?? "",
                        startDate: days.min() ?? "", endDate: detail.showings.map { LocalTime.format($0.end, zone: zone, withTime: false) }.max() ?? "",
                        showInfo: detail.showings.map { showing in
                            ShowInfo(time: LocalTime.format(showing.start, zone: zone, withTime: !showing.allDay), placeName: showing.venue?.name ?? "",
                                     addr: showing.venue?.address ?? "", priceInfo: showing.priceText ?? (showing.isFree ? "免費" : ""),
                                     isFree: showing.isFree ? 1 : 0, latitude: showing.venue?.lat, longitude: showing.venue?.lon)
                        }))
                }),
        ])
    }
}

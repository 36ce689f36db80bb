import Foundation
import GatewayCore

/// A week of sample events in Kaohsiung (ctID 15), one or more in each of the old app's
/// categories, dated from the day the demo data is loaded: the old app's default query (today to
/// today + 7) finds them. The venues are real places with their real coordinates; the events are
/// made up.
enum EventDemoData {
    struct Place {
        var name: String
        var address: String
        var lat: Double
        var lon: Double
    }

    static let places = [
        Place(name: "衛武營國家藝術文化中心", address: "高雄市鳳山區三多一路1號", lat: 22.6237, lon: 120.3420),
        Place(name: "高雄市文化中心", address: "高雄市苓雅區五福一路67號", lat: 22.6270, lon: 120.3176),
        Place(name: "駁二藝術特區", address: "高雄市鹽埕區大勇路1號", lat: 22.6203, lon: 120.2818),
        Place(name: "高雄市立美術館", address: "高雄市鼓山區美術館路80號", lat: 22.6565, lon: 120.2866),
        Place(name: "高雄流行音樂中心", address: "高雄市鹽埕區真愛路1號", lat: 22.6197, lon: 120.2946),
        Place(name: "高雄市立圖書館總館", address: "高雄市前鎮區新光路61號", lat: 22.6105, lon: 120.3020),
    ]

    struct Sample {
        var title: String
        var description: String
        var organizer: String
        var category: Int
        var place: Int
        /// Days from today, and the local start hour and minute of each showing.
        var days: [Int]
        var hour: Int
        var minute: Int
        var minutes: Int
        var price: String?
        var capacity: Int?
    }

    static let samples = [
        Sample(title: "港都管樂之夜", description: "高雄市管樂團演出經典電影配樂與台灣民謠。", organizer: "高雄市管樂團", category: 1, place: 1,
               days: [1, 5], hour: 19, minute: 30, minutes: 120, price: "300、500、800元", capacity: 120),
        Sample(title: "海港的故事", description: "一齣關於鹽埕老街與碼頭工人的舞台劇。", organizer: "港都劇團", category: 2, place: 0,
               days: [2, 3, 4], hour: 19, minute: 30, minutes: 150, price: "600元起", capacity: 200),
        Sample(title: "當代舞蹈：潮汐", description: "以潮汐為題的當代舞蹈作品，結合現場音樂。", organizer: "左營舞蹈工作室", category: 3, place: 0,
               days: [6], hour: 14, minute: 30, minutes: 90, price: "400元", capacity: 80),
        Sample(title: "親子偶戲：小鯨魚回家", description: "適合三歲以上孩子的布袋戲與手作工作坊。", organizer: "大樹偶劇團", category: 4, place: 5,
               days: [0, 3, 7], hour: 10, minute: 0, minutes: 60, price: nil, capacity: 40),
        Sample(title: "港灣光影攝影展", description: "百年高雄港的老照片與當代攝影對照展出。", organizer: "高雄市立美術館", category: 6, place: 3,
               days: [-10], hour: 9, minute: 30, minutes: 40 * 24 * 60, price: nil, capacity: nil),
        Sample(title: "城市散步講座：鹽埕百年", description: "文史工作者帶你認識鹽埕的街屋與產業。", organizer: "高雄市立圖書館", category: 7, place: 5,
               days: [2], hour: 14, minute: 0, minutes: 120, price: nil, capacity: 100),
        Sample(title: "週末露天電影院", description: "在駁二倉庫前的草地放映經典國片，自備野餐墊。", organizer: "駁二藝術特區", category: 8, place: 2,
               days: [4, 5], hour: 19, minute: 0, minutes: 130, price: nil, capacity: nil),
        Sample(title: "駁二創意市集", description: "在地設計師、手作與小農的週末市集。", organizer: "駁二藝術特區", category: 15, place: 2,
               days: [4, 5], hour: 13, minute: 0, minutes: 360, price: nil, capacity: nil),
        Sample(title: "海音館搖滾之夜", description: "五組獨立樂團在高雄流行音樂中心海音館連番登場。", organizer: "高雄流行音樂中心", category: 17, place: 4,
               days: [5], hour: 19, minute: 0, minutes: 180, price: "預售1200元，現場1500元", capacity: 500),
    ]

    static func load(into service: EventService) async throws {
        let zone = service.zone(of: 15)
        var local = Calendar(identifier: .gregorian)
        local.timeZone = zone
        let calendar = local
        let today = calendar.startOfDay(for: service.context.clock.now())
        try await service.store.database.transaction { db in
            var venues: [Int64] = []
            for place in places {
                venues.append(try await service.store.createVenue(VenueInput(name: place.name, address: place.address, city: 15, lat: place.lat, lon: place.lon),
                                                                  name: place.name, owner: nil, on: db).id)
            }
            for sample in samples {
                let showings = sample.days.compactMap { day -> ShowingInput? in
                    guard let date = calendar.date(byAdding: .day, value: day, to: today),
                          let start = calendar.date(bySettingHour: sample.hour, minute: sample.minute, second: 0, of: date) else { return nil }
                    return ShowingInput(venue: venues[sample.place], start: start, end: start.addingTimeInterval(Double(sample.minutes) * 60),
                                        priceText: sample.price, isFree: sample.price == nil, capacity: sample.capacity)
                }
                let input = EventInput(title: sample.title, description: sample.description, organizer: sample.organizer, infoSource: "示範資料",
                                       city: 15, categories: [sample.category], status: .published, showings: showings)
                _ = try await service.store.insertEvent(input, title: sample.title, owner: nil, uid: nil, status: .published, on: db)
            }
        }
        await service.store.changed(all: true)
    }
}

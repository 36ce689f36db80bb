import GatewayCore
import SQLKit

/// The schema of the host's own tables (owner `gateway` in `gateway_migrations`), every step in
/// order: accounts, sessions and keys, notifications, cluster rate limits and leases, password
/// resets, realms, grants, email verification, the replacements of shipped secrets, identities
/// linked to accounts. A new step takes the next free number and goes at the end; a step that has
/// shipped is never edited (an existing database has applied it), a change is a new step.
enum HostMigrations {
    static let all: [Migration] = [
        Migration(1, "notifications and history") { db in
            try await db.create(table: "gateway_notifications").ifNotExists()
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("user_id", type: .text, .notNull)
                .column("plugin", type: .text, .notNull)
                .column("title", type: .text, .notNull)
                .column("body", type: .text, .notNull)
                .column("link", type: .text)
                .column("created_at", type: .double, .notNull)
                .column("read_at", type: .double)
                .run()
            try await db.create(index: "gateway_notifications_user").on("gateway_notifications").column("user_id").column("created_at").run()
            try await db.create(table: "gateway_history").ifNotExists()
                .column("id", type: .text, .notNull, .unique)
                .column("user_id", type: .text, .notNull)
                .column("plugin", type: .text, .notNull)
                .column("resource", type: .text, .notNull)
                .column("title", type: .text, .notNull)
                .column("viewed_at", type: .double, .notNull)
                .primaryKey("user_id", "plugin", "resource")
                .run()
            try await db.create(table: "gateway_demo_data").ifNotExists()
                .column("plugin", type: .text, .primaryKey(autoIncrement: false))
                .column("loaded_at", type: .text, .notNull)
                .run()
        },
        Migration(2, "users, sessions and api keys") { db in
            try await db.create(table: "gateway_users")
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("username", type: .text, .notNull)
                .column("username_key", type: .text, .notNull, .unique)
                .column("display_name", type: .text, .notNull)
                .column("profile", type: .text, .notNull)
                .column("password_hash", type: .text, .notNull)
                .column("is_admin", type: .bigint, .notNull)
                .column("disabled", type: .bigint, .notNull)
                .column("created_at", type: .double, .notNull)
                .column("updated_at", type: .double, .notNull)
                .run()
            try await db.create(table: "gateway_sessions")
                .column("token_hash", type: .text, .primaryKey(autoIncrement: false))
                .column("user_id", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .column("expires_at", type: .double, .notNull)
                .column("revoked_at", type: .double)
                .run()
            try await db.create(index: "gateway_sessions_user").on("gateway_sessions").column("user_id").run()
            try await db.create(table: "gateway_api_keys")
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("key_hash", type: .text, .notNull, .unique)
                .column("prefix", type: .text, .notNull)
                .column("user_id", type: .text)
                .column("label", type: .text, .notNull)
                .column("scopes", type: .text, .notNull)
                .column("resources", type: .text, .notNull)
                .column("allowed_addresses", type: .text, .notNull)
                .column("rate", type: .text)
                .column("expires_at", type: .double)
                .column("revoked_at", type: .double)
                .column("created_at", type: .double, .notNull)
                .run()
            try await db.create(index: "gateway_api_keys_user").on("gateway_api_keys").column("user_id").run()
        },
        Migration(3, "cluster rate limits") { db in
            try await db.create(table: "gateway_rate_limits").ifNotExists()
                .column("bucket", type: .text, .primaryKey(autoIncrement: false))
                .column("tat", type: .double, .notNull)
                .run()
        },
        Migration(4, "account email addresses") { db in
            try await db.alter(table: "gateway_users").column("email_key", type: .text).run()
            try await db.create(index: "gateway_users_email").unique().on("gateway_users").column("email_key").run()
        },
        // `options`: free JSON a user keeps on the account. `prehash_name`: the name a renamed
        // user's password was prehashed with (``Secret``), until the password is set again.
        Migration(5, "account options, and renaming") { db in
            try await db.alter(table: "gateway_users").column("options", type: .text).run()
            try await db.alter(table: "gateway_users").column("prehash_name", type: .text).run()
        },
        Migration(6, "password resets") { db in
            try await db.create(table: "gateway_password_resets")
                .column("token_hash", type: .text, .primaryKey(autoIncrement: false))
                .column("user_id", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .column("expires_at", type: .double, .notNull)
                .column("used_at", type: .double)
                .run()
            try await db.create(index: "gateway_password_resets_user").on("gateway_password_resets").column("user_id").column("created_at").run()
        },
        Migration(7, "cluster leases") { db in
            try await db.create(table: "gateway_leases")
                .column("name", type: .text, .primaryKey(autoIncrement: false))
                .column("holder", type: .text, .notNull)
                .column("expires_at", type: .bigint, .notNull)
                .run()
        },
        Migration(20, "realm members") { db in
            try await db.create(table: "gateway_realm_members")
                .column("realm", type: .text, .notNull)
                .column("user_id", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .primaryKey("realm", "user_id")
                .run()
            try await db.create(index: "gateway_realm_members_user").on("gateway_realm_members").column("user_id").run()
        },
        // `own_limit`: the key counts its requests in a bucket of its own, not its owner's.
        Migration(21, "keys with a rate-limit bucket of their own") { db in
            try await db.alter(table: "gateway_api_keys").column("own_limit", type: .bigint).run()
        },
        Migration(22, "replacements of shipped secrets") { db in
            try await db.create(table: "gateway_generated_secrets")
                .column("shipped", type: .text, .primaryKey(autoIncrement: false))
                .column("sha256", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .run()
        },
        Migration(30, "user grants") { db in
            try await db.create(table: "gateway_user_grants")
                .column("user_id", type: .text, .notNull)
                .column("scope", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .primaryKey("user_id", "scope")
                .run()
        },
        Migration(40, "email verification") { db in
            try await db.alter(table: "gateway_users").column("verified_email", type: .text).run()
            try await db.create(table: "gateway_email_verifications")
                .column("token_hash", type: .text, .primaryKey(autoIncrement: false))
                .column("user_id", type: .text, .notNull)
                .column("email_key", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .column("expires_at", type: .double, .notNull)
                .column("used_at", type: .double)
                .run()
            try await db.create(index: "gateway_email_verifications_user").on("gateway_email_verifications").column("user_id").column("created_at").run()
        },
        // Accounts of callers who sign in at an identity provider (`auth.providers`), by (issuer, subject).
        Migration(50, "identities linked to accounts") { db in
            try await db.create(table: "gateway_identities")
                .column("issuer", type: .text, .notNull)
                .column("subject", type: .text, .notNull)
                .column("user_id", type: .text, .notNull)
                .column("provider", type: .text, .notNull)
                .column("created_at", type: .double, .notNull)
                .primaryKey("issuer", "subject")
                .run()
            try await db.create(index: "gateway_identities_user").on("gateway_identities").column("user_id").run()
        },
        // Consumer groups (`limits.groups`) of accounts and keys, and what callers used of their
        // groups' quotas: one row per caller and group, its current window's start and use.
        Migration(51, "consumer groups and quotas") { db in
            try await db.alter(table: "gateway_users").column("consumer_group", type: .text).run()
            try await db.alter(table: "gateway_api_keys").column("consumer_group", type: .text).run()
            try await db.create(table: "gateway_quota_usage")
                .column("bucket", type: .text, .primaryKey(autoIncrement: false))
                .column("window_start", type: .bigint, .notNull)
                .column("used", type: .bigint, .notNull)
                .run()
        },
        // What administrators changed through the admin API (`/v1/admin/audit`).
        Migration(52, "audit log") { db in
            try await db.create(table: "gateway_audit")
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("at", type: .double, .notNull)
                .column("actor", type: .text, .notNull)
                .column("actor_name", type: .text)
                .column("credential", type: .text)
                .column("address", type: .text, .notNull)
                .column("action", type: .text, .notNull)
                .column("target", type: .text)
                .column("detail", type: .text, .notNull)
                .run()
            try await db.create(index: "gateway_audit_at").on("gateway_audit").column("at").run()
        },
        // The instances serving the database, each its row while it runs (`/v1/admin/instances`).
        Migration(53, "instances") { db in
            try await db.create(table: "gateway_instances")
                .column("id", type: .text, .primaryKey(autoIncrement: false))
                .column("host", type: .text, .notNull)
                .column("pid", type: .bigint, .notNull)
                .column("version", type: .text, .notNull)
                .column("started_at", type: .double, .notNull)
                .column("seen_at", type: .double, .notNull)
                .column("rate", type: .double, .notNull)
                .column("p50", type: .double)
                .column("p99", type: .double)
                .column("errors", type: .double, .notNull)
                .column("limited", type: .double, .notNull)
                .column("cache_hit_rate", type: .double)
                .run()
        },
    ]
}

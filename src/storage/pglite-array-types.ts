/**
 * @module storage/pglite-array-types
 * The array types PGlite needs parsers and serializers for, known without asking the database.
 *
 * Why: PGlite 0.5 runs one catalog query at the end of every start (`_initArrayTypes`, a self-join
 * of `pg_type`) to learn, for each element type, the OID of its array type. On a store that has
 * just started, that query is the first one: every page of `pg_type` and every code path of the
 * planner it touches is cold, so it cost about a tenth of an existing store's opening
 * (docs/benchmarks.md, "The store ready sooner"). The answer does not depend on the store: the
 * built-in types are Postgres's own, and their OIDs below 10000 are hand-assigned in its catalog
 * headers, the same in every database of a major version. The schema of the migrations creates no
 * type of its own (a table's row type is the only kind, and no statement sends or reads arrays of
 * rows). So the table below is what that query answers for every OID below 10000 (checked against
 * the live catalog by test/storage/pglite-start.test.ts, which fails when PGlite's Postgres changes).
 *
 * What is left out: array types of types whose OIDs initdb assigns (10000 and up: the catalogs' own
 * row types, and the row types of our tables), which PGlite would have parsed as arrays of strings.
 * A host that needs them calls PGlite's `refreshArrayTypes()`, which still runs the query.
 */
import { types, type PGlite } from '@electric-sql/pglite';

/** [element type OID, array type OID] for every built-in array type with an OID below 10000. */
export const BUILTIN_ARRAY_TYPES: ReadonlyArray<readonly [number, number]> = [
  [16, 1000], [17, 1001], [18, 1002], [19, 1003], [20, 1016], [21, 1005], [22, 1006], [23, 1007],
  [24, 1008], [25, 1009], [26, 1028], [27, 1010], [28, 1011], [29, 1012], [30, 1013], [71, 210], [75, 270],
  [81, 272], [83, 273], [114, 199], [142, 143], [600, 1017], [601, 1018], [602, 1019], [603, 1020],
  [604, 1027], [628, 629], [650, 651], [700, 1021], [701, 1022], [718, 719], [774, 775], [790, 791],
  [829, 1040], [869, 1041], [1033, 1034], [1042, 1014], [1043, 1015], [1082, 1182], [1083, 1183],
  [1114, 1115], [1184, 1185], [1186, 1187], [1266, 1270], [1560, 1561], [1562, 1563], [1700, 1231],
  [1790, 2201], [2202, 2207], [2203, 2208], [2204, 2209], [2205, 2210], [2206, 2211], [2275, 1263],
  [2950, 2951], [2970, 2949], [3220, 3221], [3614, 3643], [3615, 3645], [3642, 3644], [3734, 3735],
  [3769, 3770], [3802, 3807], [3904, 3905], [3906, 3907], [3908, 3909], [3910, 3911], [3912, 3913],
  [3926, 3927], [4072, 4073], [4089, 4090], [4096, 4097], [4191, 4192], [4451, 6150], [4532, 6151],
  [4533, 6152], [4534, 6153], [4535, 6155], [4536, 6157], [5038, 5039], [5069, 271],
];

/**
 * Installs the array parsers and serializers exactly as PGlite's `_initArrayTypes` builds them:
 * each reads the element's parser or serializer when it runs, so a later change to those is seen.
 */
export function installBuiltinArrayTypes(db: Pick<PGlite, 'parsers' | 'serializers'>): void {
  for (const [element, array] of BUILTIN_ARRAY_TYPES) {
    db.serializers[array] = (x) => types.arraySerializer(x, db.serializers[element], array);
    db.parsers[array] = (x) => types.arrayParser(x, db.parsers[element] as types.Parser, array);
  }
}

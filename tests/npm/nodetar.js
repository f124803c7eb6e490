// What npm itself makes of each tarball named on the command line, as JSON on stdout: the
// entries node-tar's Parser reads (type, path, link target, size, sha256 of the bytes), the
// files pacote's extraction writes (path -> sha256), and each extracted package.json as
// npm's own parser reads it. `npm root -g` is passed as the first argument: npm's bundled
// tar, pacote and @npmcli/package-json are the ones an install runs.
'use strict'
const crypto = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const npmDir = path.join(process.argv[2], 'npm')
const need = (name) => require(path.join(npmDir, 'node_modules', name))
const tar = need('tar')
const pacote = need('pacote')
const { readPackage } = need('@npmcli/package-json/lib/read-package.js')

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex')

const entries = (file) => new Promise((resolve) => {
  const found = []
  const warnings = []
  const parser = new tar.Parser({ onwarn: (code, message) => warnings.push(`${code}: ${message}`) })
  parser.on('entry', (entry) => {
    const hash = crypto.createHash('sha256')
    let size = 0
    entry.on('data', (chunk) => { hash.update(chunk); size += chunk.length })
    entry.on('end', () => found.push({
      type: entry.type, path: entry.path, linkpath: entry.linkpath ?? null, size,
      sha256: hash.digest('hex'),
    }))
  })
  let done = false
  const end = (error) => {
    if (!done) {
      done = true
      resolve({ entries: found, warnings, error: error ? String(error.message || error) : null })
    }
  }
  parser.on('error', end)
  parser.on('abort', end)
  parser.on('close', () => end(null))
  parser.on('end', () => end(null))
  fs.createReadStream(file).pipe(parser)
})

const walk = (root, folder, out) => {
  for (const name of fs.readdirSync(path.join(root, folder))) {
    const relative = folder ? `${folder}/${name}` : name
    const stat = fs.lstatSync(path.join(root, relative))
    if (stat.isDirectory()) walk(root, relative, out)
    else out[relative] = stat.isFile() ? sha256(fs.readFileSync(path.join(root, relative)))
      : 'not a file'
  }
  return out
}

// an entry node-tar passes on that the file system refuses (a NUL in its path) throws
// outside any promise: that extraction fails, as npm's would, and the next one goes on
let failCurrent = null
process.on('uncaughtException', (error) => {
  if (!failCurrent) throw error
  failCurrent(error)
})

const extracted = async (file) => {
  const dest = fs.mkdtempSync(path.join(os.tmpdir(), 'nodetar-'))
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'nodetar-cache-'))
  try {
    const fetcher = new pacote.FileFetcher(`file:${file}`, { cache })
    fetcher.package = {} // known already: FileFetcher then skips reading the package.json
    await new Promise((resolve, reject) => {
      failCurrent = reject
      fetcher.extract(dest).then(resolve, reject)
    }).finally(() => { failCurrent = null })
    const files = walk(dest, '', {})
    const manifests = {}
    for (const relative of Object.keys(files)) {
      if (path.basename(relative) !== 'package.json') continue
      let read
      try {
        read = await readPackage(path.join(dest, relative))
      } catch (error) {
        manifests[relative] = { error: String(error.message).slice(0, 200) }
        continue
      }
      try {
        manifests[relative] = { value: JSON.stringify(read) }
      } catch {
        // nested too deep for JSON.stringify (npm parsed it): its scripts alone
        manifests[relative] = { scripts: JSON.stringify(read?.scripts ?? null) }
      }
    }
    return { files, manifests, error: null }
  } catch (error) {
    return { files: {}, manifests: {}, error: String(error.message || error) }
  } finally {
    fs.rmSync(dest, { recursive: true, force: true })
    fs.rmSync(cache, { recursive: true, force: true })
  }
}

// a file named `parse:PATH` is only listed (no extraction): what node-tar reads of a tarball
// too large to write out in a test; its entries are counted, the first 1,000 kept
const main = async () => {
  const out = {}
  for (const arg of process.argv.slice(3)) {
    if (arg.startsWith('parse:')) {
      const parsed = await entries(arg.slice('parse:'.length))
      out[arg] = { parsed: { ...parsed, count: parsed.entries.length,
        entries: parsed.entries.slice(0, 1000) } }
    } else {
      out[arg] = { parsed: await entries(arg), extracted: await extracted(arg) }
    }
  }
  process.stdout.write(JSON.stringify(out))
}

main()
